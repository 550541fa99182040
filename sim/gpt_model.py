"""The tiny GPT of issue 17 as torch 1.13 runs it: nanoGPT's model.py shape, written from
the design docs/tiny_gpt.md describes, plus our auxiliary head. Used by sim/gpt_reference.py.

Everything here draws from torch's default generator in program order (construction, initialisation, batches,
dropout masks), as nanoGPT's train.py does after its one torch.manual_seed.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPTConfig:
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias, gelu, aux_head_every):
        self.vocab_size = vocab_size
        self.block_size = block_size
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_embd = n_embd
        self.dropout = dropout
        self.bias = bias
        self.gelu = gelu  # 'none' (nn.GELU(), nanoGPT's) or 'tanh'
        self.aux_head_every = aux_head_every  # 0: no aux head (exactly nanoGPT's model)


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nn.LayerNorm in 1.13 cannot drop only the bias)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        # nn.Dropout(0.0) in training returns its input and draws nothing (measured: check_facts.py e).
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        # The causal mask as a (persistent) buffer: it is in the state_dict as transformer.h.i.attn.bias, and
        # DDP broadcasts it from rank 0 (broadcast_buffers=True).
        self.register_buffer('bias', torch.tril(torch.ones(cfg.block_size, cfg.block_size))
                             .view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        # torch 1.13 has no scaled_dot_product_attention: the explicit path.
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU(approximate=cfg.gelu)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=LayerNorm(cfg.n_embd, cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # Weight tying: one Parameter, two uses. named_parameters()/parameters() list it once, first met as
        # transformer.wte.weight; the state_dict has both keys.
        self.transformer.wte.weight = self.lm_head.weight
        if cfg.aux_head_every > 0:
            self.aux_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.use_aux = False  # set by the training loop before each forward
        self.forward_calls = 0  # counts forwards that started (the oracle checks where DDP raises)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        self.forward_calls += 1
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        if self.use_aux:
            aux = self.aux_head(x)
            loss = loss + F.cross_entropy(aux.view(-1, aux.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def aux_used(step, aux_head_every):
    """The aux head is used on steps 0, K, 2K, ... (step % K == 0, as train.py's eval_interval test reads)."""
    return aux_head_every > 0 and step % aux_head_every == 0


def configure_optimizer(model, weight_decay, lr, betas):
    """nanoGPT's two groups: decay on every parameter with dim >= 2 (embeddings, Linear weights, the aux head),
    none on biases and LayerNorm weights; each group in named_parameters order. torch 1.13's single-tensor
    AdamW (foreach=False), eps 1e-8."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for _, p in params if p.dim() >= 2]
    no_decay = [p for _, p in params if p.dim() < 2]
    groups = [{'params': decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8, foreach=False)


class TextData:
    """--dataset text: vocab = the sorted distinct bytes of the file, token = its index; train the first 90%."""

    def __init__(self, path):
        with open(path, 'rb') as f:
            raw = f.read()
        self.vocab = sorted(set(raw))
        index = {b: i for i, b in enumerate(self.vocab)}
        tokens = torch.tensor([index[b] for b in raw], dtype=torch.int64)
        n = len(tokens)
        self.train = tokens[:int(n * 0.9)]
        self.val = tokens[int(n * 0.9):]

    def get_batch(self, split, batch_size, block_size):
        """nanoGPT's get_batch: one randint from the default generator, then the windows."""
        data = self.train if split == 'train' else self.val
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i:i + block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
        return x, y, ix
