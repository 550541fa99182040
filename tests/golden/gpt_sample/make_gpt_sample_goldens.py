#!/usr/bin/python3
"""Writes tests/golden/gpt_sample/gpt_sample.json from torch 1.13 on CPU, one thread: torch.multinomial(probs, 1)
on its own, and nanoGPT's GPT.generate on a tiny GPT (sim/gpt_model.py) after a few AdamW steps, so that its
next-token distributions are not flat. Run from the repository root:

    /usr/bin/python3 tests/golden/gpt_sample/make_gpt_sample_goldens.py

Kernels pinned before torch loads, as tests/golden/make_goldens.py pins them. Nothing here is hand-edited.
"""
import json
import os
import sys
import tempfile

os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                  ONEDNN_MAX_CPU_ISA='AVX2')
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, 'sim'))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gpt_model import GPT, GPTConfig, TextData, configure_optimizer  # noqa: E402

DATA = '/usr/share/common-licenses/GPL-3'


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    """nanoGPT's GPT.generate, with its forward's inference path (targets None: lm_head on the last position)."""
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= model.config.block_size else idx[:, -model.config.block_size:]
        t = idx_cond.size(1)
        x = model.transformer.drop(model.transformer.wte(idx_cond) + model.transformer.wpe(torch.arange(0, t)))
        for block in model.transformer.h:
            x = block(x)
        x = model.transformer.ln_f(x)
        logits = model.lm_head(x[:, [-1], :])
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def multinomial_cases():
    cases = []
    for i, (rows, cols, scale) in enumerate([(1, 5, 1.0), (1, 76, 3.0), (2, 76, 3.0), (3, 7, 0.5), (4, 65, 8.0),
                                             (1, 1, 1.0), (2, 33, 20.0), (5, 16, 2.0)]):
        torch.manual_seed(100 + i)
        probs = F.softmax(torch.randn(rows, cols) * scale, dim=-1)
        if i == 4:
            probs[:, ::3] = 0.0  # zero entries, as top-k leaves them
        seed = 1000 + i
        torch.manual_seed(seed)
        out = torch.multinomial(probs, 1)
        after = torch.randint(1 << 30, (4,))  # the generator's next draws: how much multinomial consumed
        cases.append({'seed': seed, 'rows': rows, 'cols': cols, 'probs': f32(probs), 'samples': out.flatten().tolist(),
                      'next_randint': after.tolist()})
    return cases


def generate_cases():
    data = TextData(DATA)
    out = []
    for name, kw, train_steps, runs in [
        ('c32_t16', dict(n_embd=32, block_size=16, n_layer=2, n_head=2, bias=True, gelu='none'), 30,
         [(1, 40, 1.0, None), (2, 24, 0.8, None), (2, 24, 1.0, 5), (1, 20, 0.7, 1)]),
        ('c16_t8_nobias_tanh', dict(n_embd=16, block_size=8, n_layer=2, n_head=2, bias=False, gelu='tanh'), 20,
         [(3, 20, 1.0, None), (1, 30, 1.3, 10)]),
    ]:
        torch.manual_seed(1337)
        cfg = GPTConfig(vocab_size=len(data.vocab), dropout=0.0, aux_head_every=0, **kw)
        model = GPT(cfg)
        opt = configure_optimizer(model, 0.1, 1e-2, (0.9, 0.95))
        for _ in range(train_steps):
            x, y, _ = data.get_batch('train', 4, cfg.block_size)
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        model.eval()
        state = {n: f32(p) for n, p in model.named_parameters()}
        samples = []
        for i, (B, new, temperature, top_k) in enumerate(runs):
            seed = 7 + i
            torch.manual_seed(seed)
            prompt = torch.randint(len(data.vocab), (B, 1 + i))
            res = generate(model, prompt, new, temperature, top_k)
            samples.append({'seed': seed, 'batch': B, 'prompt': prompt.flatten().tolist(), 'max_new_tokens': new,
                            'temperature': temperature, 'top_k': top_k or 0, 'tokens': res.flatten().tolist(),
                            'next_randint': torch.randint(1 << 30, (4,)).tolist()})
        out.append({'name': name, 'config': dict(kw, vocab_size=len(data.vocab)), 'train_steps': train_steps,
                    'final_loss': float(loss), 'parameters': state, 'samples': samples})
    return out


def main():
    torch.set_num_threads(1)
    doc = {'torch': torch.__version__, 'data': DATA, 'multinomial': multinomial_cases(), 'generate': generate_cases()}
    path = os.path.join(HERE, 'gpt_sample.json')
    fd, tmp = tempfile.mkstemp(dir=HERE, prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    for g in doc['generate']:
        print(g['name'], 'loss after', g['train_steps'], 'steps', round(g['final_loss'], 4))
        for s in g['samples']:
            print('  ', repr(bytes(data_vocab[t] for t in s['tokens'][:60]).decode('latin-1')))


if __name__ == '__main__':
    data_vocab = TextData(DATA).vocab
    main()
