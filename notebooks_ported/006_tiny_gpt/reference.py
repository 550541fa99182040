#!/usr/bin/python3
"""Lab 006's claims in PyTorch: the same runs under real torch 1.13 DDP (sim/gpt_reference.py: Gloo, one process
per rank, one thread each, kernels pinned; model in sim/gpt_model.py), printed as the lab prints its "check:"
lines. The lab's defaults: 2 ranks, 2 layers, 2 heads, n_embd 16, block 8, batch 4, seed 1337, 4 steps, lr 1e-2.

    /usr/bin/python3 notebooks_ported/006_tiny_gpt/reference.py > tests/golden/notebooks/006_tiny_gpt.txt

About a dozen short DDP runs (a minute on a loaded machine). tests/notebooks_test checks that every line it
prints is among the lab's.
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'sim'))
import gpt_reference  # noqa: E402  (pins the kernels before torch loads; TORCH_DISTRIBUTED_DEBUG=DETAIL)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gpt_model import GPT, GPTConfig, TextData  # noqa: E402

WS, SEED, STEPS = 2, 1337, 4
BASE = ['--n-embd', '16', '--block-size', '8', '--lr', '1e-2', '--world-size', str(WS), '--seed', str(SEED),
        '--steps', str(STEPS)]
DATA = '/usr/share/common-licenses/GPL-3'


def oracle(*extra):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'out.json')
        args = BASE + list(extra) + ['--dump-params', out]
        if gpt_reference.main(args) != 0:
            sys.exit(f'reference: sim/gpt_reference.py {" ".join(args)} failed')
        with open(out) as f:
            return json.load(f)


def flat(doc, rank=0):
    params = doc['replicas'][rank] if 'replicas' in doc else doc['params']
    out = []
    for v in params.values():
        stack = [v]
        while stack:
            x = stack.pop(0)
            if isinstance(x, list):
                stack = list(x) + stack
            else:
                out.append(x)
    return out


def g9(values):
    """float32 values (the oracle writes their shortest decimals) as the lab prints them: 9 significant digits."""
    return ' '.join('%.9g' % float(np.float32(v)) for v in values)


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    """nanoGPT's GPT.generate with its forward's inference path (lm_head on the last position only)."""
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= model.config.block_size else idx[:, -model.config.block_size:]
        x = model.transformer.drop(model.transformer.wte(idx_cond) +
                                   model.transformer.wpe(torch.arange(0, idx_cond.size(1))))
        for block in model.transformer.h:
            x = block(x)
        logits = model.lm_head(model.transformer.ln_f(x)[:, [-1], :])[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
    return idx


def config(data):
    return GPTConfig(len(data.vocab), 8, 2, 2, 16, 0.0, True, 'none', 0)


def rank_generator_after_training(data, seed, steps, no_sync=1):
    """A rank's default generator after train.py: manual_seed, the model's construction, then one get_batch
    before the loop and one per micro-step (dropout 0 draws nothing; DDP draws nothing)."""
    torch.manual_seed(seed)
    GPT(config(data))
    for _ in range(1 + steps * no_sync):
        data.get_batch('train', 4, 8)


def main():
    torch.set_num_threads(1)
    data = TextData(DATA)
    # 1. the tied weight
    base = oracle()
    names = list(base['params'].keys())
    print(f'check: parameters(): {len(names)} tensors, transformer.wte.weight listed '
          f'{names.count("transformer.wte.weight")}, lm_head.weight listed {names.count("lm_head.weight")}')
    print('check: rebuilt buckets (gradient-ready order): ' +
          ' | '.join(' '.join(b) for b in base['ranks'][0]['buckets']['buckets']))
    # 2. unused parameters
    err = oracle('--aux-head-every', '2', '--find-unused-parameters', 'false')['ranks'][0]['error']
    print(f'check: find_unused_parameters=False: {err["type"]} at step {err["step"]} micro-step {err["micro"]}')
    for line in err['message'].split('\n'):
        print('check: torch: ' + line)
    for none in (True, False):
        r = oracle('--aux-head-every', '2', '--find-unused-parameters', 'true', '--steps', '2', '--zero-grad',
                   'none' if none else 'zeros')['ranks'][0]
        grad = 'None' if 'aux_head.weight' in r['grad_none'][1] else \
            'zeros' if 'aux_head.weight' in r['grad_all_zero'][1] else 'nonzero'
        print(f'check: find_unused_parameters=True zero_grad(set_to_none={none}): step 1: aux_head.weight.grad '
              f'{grad}, unchanged by optimizer.step: {"aux_head.weight" in r["unchanged_by_step"][1]}')
    # 3. accumulation
    acc = oracle('--no-sync', '2', '--steps', '3')
    for r in range(WS):
        print(f'check: no_sync 2 losses rank {r}: {g9(acc["losses"][r])}')
    # 4. clipping
    clip = oracle('--clip-grad-norm', '1.0')
    for r in range(WS):
        print(f'check: clip_grad_norm_ total norm rank {r}: {g9(clip["ranks"][r]["clip_total_norm"])}')
    # 5. gradient_as_bucket_view
    for ws in (3, 2):
        t, f = (flat(oracle('--world-size', str(ws), '--zero-grad', 'zeros', '--gradient-as-bucket-view', v))
                for v in ('true', 'false'))
        differ = sum(a != b for a, b in zip(t, f))
        print(f'check: ws {ws} zero_grad zeros: gradient_as_bucket_view True vs False: {differ} of {len(t)} '
              'values differ')
    # 6. seeding: the first get_batch comes right after the model's construction
    for per_rank in (False, True):
        for r in range(WS):
            torch.manual_seed(SEED + r if per_rank else SEED)
            GPT(config(data))
            ix = torch.randint(len(data.train) - 8, (4,))
            print(f'check: {"seed + rank" if per_rank else "seed alike"} rank {r} first batch ix: '
                  f'{" ".join(str(int(i)) for i in ix)}')
    # 7. sampling: DDP's final weights (equal on every rank), each rank's generator as training left it
    per = oracle('--seed-per-rank')
    for doc, per_rank in ((base, False), (per, True)):
        assert doc['replicas_equal']
        for r in range(WS):
            model = GPT(config(data))
            model.load_state_dict({**{k: torch.tensor(v) for k, v in doc['params'].items()},
                                   'lm_head.weight': torch.tensor(doc['params']['transformer.wte.weight'])},
                                  strict=False)
            model.eval()
            rank_generator_after_training(data, SEED + r if per_rank else SEED, STEPS)
            prompt = torch.tensor([[data.vocab.index(ord('\n'))]])
            out = generate(model, prompt, 40)
            text = bytes(data.vocab[t] for t in out[0].tolist()).decode('latin-1').replace('\n', '\\n')
            print(f'check: sample {"seed + rank" if per_rank else "seed alike"} rank {r}: {text}')


if __name__ == '__main__':
    main()
