"""The sample a whole-run step keeps: the same few elements on every rank, chosen anew at each step, with every
value ddp_check needs to replay them bit for bit (docs/trace_format.md, "The sample")."""

import torch

# Elements a whole-run step keeps of each kind. Slot k of step s is the element
#   ((s * SLOTS + k) * SAMPLE_MULTIPLIER) mod total
# of the parameters laid end to end in manifest order, row-major. The multiplier is a prime larger than any
# model, so consecutive (s, k) visit every element once in `total` slots: the run covers the model once every
# total / SLOTS steps. src/check/sample_replay.cc computes the same slots.
SLOTS = 64
SAMPLE_MULTIPLIER = 2654435761


def _plan(step, sizes):
    """{parameter index: (slots, element indices)} for `step`, over parameters of `sizes` elements."""
    total = sum(sizes)
    if total == 0:
        return {}
    starts, acc = [], 0
    for n in sizes:
        starts.append(acc)
        acc += n
    plan = {}
    for k in range(SLOTS):
        flat = ((step * SLOTS + k) * SAMPLE_MULTIPLIER) % total
        lo, hi = 0, len(sizes) - 1  # the parameter holding `flat`: the last start <= flat
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= flat:
                lo = mid
            else:
                hi = mid - 1
        slots, elems = plan.setdefault(lo, ([], []))
        slots.append(k)
        elems.append(flat - starts[lo])
    return plan


class _Sample:
    """One step's sample: each kind's values per parameter, gathered on the tensor's own device (a few bytes
    cross to the host once per kind, when the step is written)."""

    def __init__(self, step, params):
        self.plan, self.left_out = {}, []
        sizes = [p.numel() for p in params]
        for i, (slots, elems) in _plan(step, sizes).items():
            p = params[i]
            if p.is_contiguous():
                self.plan[i] = (slots, torch.tensor(elems, dtype=torch.int64, device=p.device))
            else:  # channels_last: its memory is not row-major; left out (absent in every kind)
                self.left_out.extend(slots)
        self.values = {}  # kind -> {i: values}

    def take(self, kind, i, t):
        """Keeps tensor t's (parameter i's shape) sampled elements as `kind`."""
        got = self.plan.get(i)
        if got is not None and t is not None:
            self.values.setdefault(kind, {})[i] = t.detach().reshape(-1).index_select(0, got[1]).float()

    def take_all(self, kind, tensors):
        for i, t in tensors:
            self.take(kind, i, t)

    def kinds(self):
        """[("sample/<kind>", values of every slot)] and {kind: [absent slots]} (a parameter without that tensor,
        or left out): zeros stand in its slots."""
        out, absent = [], {}
        for kind in sorted(self.values):
            got = self.values[kind]
            vals = torch.zeros(SLOTS, dtype=torch.float32)
            missing = self.left_out + [k for i, (slots, _) in self.plan.items() if i not in got for k in slots]
            present = [i for i in sorted(self.plan) if i in got]
            if present:
                flat = torch.cat([got[i].to("cpu") for i in present])
                index = torch.tensor([k for i in present for k in self.plan[i][0]], dtype=torch.int64)
                vals.index_copy_(0, index, flat)
            out.append(("sample/" + kind, vals))
            if missing:
                absent[kind] = sorted(missing)
        return out, absent
