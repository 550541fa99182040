"""The backward of a step: local gradients, .grad before and after DDP, inputs, as the hooks see them."""


import torch

from .common import _HAVE_NUMPY, FULL_BYTES, FULL_STEPS, _Unrecordable, _cpu_copy, _dtype_name
from .digests import _digest, _finite_flag, _fingerprints, _first_tensor, _input_nonfinite, _nonfinite, _wsums
from .hooks import _HookInfo
from .sample import _Sample
from .writer import _all_bits_zero


def _batch(x):
    from .fast import _batch as fast_batch  # (numpy's module: imported where numpy is)
    return fast_batch(x)


class _Record:
    """DDPTrace's part that records a step's backward: the forward pre-hooks, the parameter hooks (local
    gradients, prior .grad), the end-of-backward and after-DDP callbacks, and the digests of what they saw."""

    def _recording(self):
        return not self._stopped and not self._closed and self._step % self.every == 0

    def _reset_step(self):
        self._backwards = []   # [{"sync": bool, "ready": [i...]}]
        self._cur_bw = None
        self._locals = []      # per backward: {i: tensor}
        self._prior = {}
        self._prior_zero = []  # full=False: parameters whose prior .grad was all +0.0 (named, not copied)
        self._prior_taken = False
        self._zero_grads = []  # zero_grad calls between this record's backwards
        self._inputs = []
        self._grad_snap = None
        self._grad_crc = None  # digest mode: {i: digest of .grad after DDP}, in place of _grad_snap
        self._before = None
        self._step_join = None
        self._nf = {}          # kind -> names (or forward indices, for "input") holding a NaN or an infinity
        self._local_finite = []  # whole-run steps: (local name, its NaN/inf flag, on the gradient's device)
        self._sample = None      # whole-run steps: the sampled elements of every tensor (sample.py)
        self._wsum = {}          # whole-run steps: kind -> {i: [S, A]}, weighted sums on the tensor's device
        self._reset_collectives()  # a sync written by hand: the step's own collectives (hand.py)

    def _note_nonfinite(self, kind, names):
        """Keeps which tensors of this step are not finite, and the run's first."""
        if not names:
            return
        self._nf.setdefault(kind, []).extend(names)
        if self._nonfinite_first is None:
            self._nonfinite_first = {"step": self._step, "kind": kind, "name": str(names[0])}

    def _forward_pre_hook(self, module, args, kwargs=None):
        if self._stopped or self._closed:
            return None
        try:
            self._forward_pre_hook_body(args, kwargs)
        except Exception as e:
            self._stop_for(e, "forward pre-hook")
        return None

    def _forward_pre_hook_body(self, args, kwargs):
        self._in_ddp_forward = True
        if not torch.is_grad_enabled():
            return  # evaluation forwards build no graph and are not recorded
        self._fwd_sync = bool(getattr(self.ddp, "require_backward_grad_sync", True))
        cfg = getattr(self.ddp, "_join_config", None)
        if cfg is not None and getattr(cfg, "enable", False):
            self._join_seen = True
            self._step_join = {"divide_by_initial_world_size":
                               bool(getattr(self.ddp, "_divide_by_initial_world_size", True))}
        self._note_input(args, kwargs)

    def _note_input(self, args, kwargs):
        """A training forward's batch: one fingerprint per sample, and whether it holds a NaN or an infinity."""
        if self._last_epoch is not None:
            self._last_epoch["training"] = True
        if self._recording():
            x = _first_tensor(args)
            if x is None and kwargs:
                x = _first_tensor(kwargs)
            fps = []
            if x is not None:
                xc = x.detach()
                if xc.device.type != "cpu":
                    xc = xc.cpu()
                got = _batch(xc) if _HAVE_NUMPY else None  # _fast.c's, in one pass
                finite = got[1] if got is not None else None
                if (not finite) if finite is not None else _input_nonfinite(xc):
                    self._note_nonfinite("input", [len(self._inputs)])
                fps = got[0] if got is not None else _fingerprints(xc)
            self._inputs.append(fps)

    def _module_pre_hook(self, module, args):
        """On DDP's wrapped module: a forward that did not come through DDP's is ddp_model.module(x)."""
        if self._stopped or self._closed:
            return None
        try:
            via_ddp, self._in_ddp_forward = self._in_ddp_forward, False
            # (inside a backward: a recomputation, activation checkpointing over the whole module)
            if not via_ddp and torch.is_grad_enabled() and self._cur_bw is None:
                self._module_forward = True
                self._note_input(args, None)  # its batch is still the rank's data
        except Exception as e:
            self._stop_for(e, "module forward pre-hook")
        return None

    def _make_unshard_hook(self, group):
        def hook(module, args):
            if self._stopped or self._closed:
                return None
            try:
                for fp in group.fsdp_params:
                    up = fp.unsharded_param
                    if id(up) in self._unsharded_hooked or not up.requires_grad:
                        continue
                    self._unsharded_hooked[id(up)] = up
                    self._handles.append(up.register_hook(self._make_grad_hook(self._index.get(id(fp.sharded_param)))))
            except Exception as e:
                self._stop_for(e, "FSDP forward pre-hook")
            return None

        return hook

    def _make_grad_hook(self, i):
        def hook(grad):
            if not (self._stopped or self._closed):
                try:
                    with self._lock:
                        self._on_grad_locked(i, grad)
                except Exception as e:
                    self._stop_for(e, "parameter hook")
            return None

        return hook

    def _on_grad_locked(self, i, grad):
        rec = self._recording()
        if self._cur_bw is None:  # the first parameter this backward reached
            # DDP decides at forward whether the backward reduces (Reducer.prepare_for_backward): a backward
            # with no DDP forward since the previous one (the wrapped module called itself, or a second backward
            # of one graph) is not reduced.
            sync = self._fwd_sync
            self._fwd_sync = None
            self._cur_bw = {"sync": bool(sync) and not self._hand, "ready": []}  # by hand: the script's own sync
            if sync is None and not self._hand:  # "module": the wrapped module's own forward ran; "none": no forward at all
                self._cur_bw["forward"] = "module" if self._module_forward else "none"
            self._module_forward = False
            self._backwards.append(self._cur_bw)
            self._locals.append({})
            self._engine.queue_callback(self._end_of_backward)
        if i is None:  # an unchecked parameter
            return
        self._cur_bw["ready"].append(i)
        if rec:
            if not self._prior_taken:
                # The step's first backward reached its first parameter: no AccumulateGrad of the step has run
                # yet, so every .grad is as the step found it (for each parameter, as it was when the step's
                # first backward reached it).
                self._prior_taken = True
                fl = self._flat_whole()
                if fl is not None:
                    self._prior_flat(fl)
                else:
                    self._prior_tensors()
            if grad is not None:
                if self._fsdp is not None and grad.dtype in (torch.bfloat16, torch.float16):
                    grad = grad.float()  # FSDP2 under a 16-bit reduce_dtype: exact in float32; ddp_check reduces in it
                if grad.layout != torch.strided or grad.dtype != torch.float32:
                    raise _Unrecordable("the gradient of '%s' is %s %s (found mid-run), and the trace format holds "
                                        "dense float32 only" % (self._names[i], str(grad.layout).replace("torch.", ""),
                                                                _dtype_name(grad.dtype)))
                fl = self._flat_whole()
                if fl is not None:  # laid flat: its sums, flags and sample at the step's write
                    self._local_flat(fl, len(self._locals) - 1, i, grad)
                elif self._whole_run():  # no copy: whether it is finite, a flag left on its device until the write
                    k = len(self._locals) - 1
                    if self._wsumming():  # its weighted sums; their S is finite exactly where the gradient is
                        ws = self._wsum.setdefault("local/%d" % k, {})[i] = _wsums(grad)
                        self._local_finite.append(("%d/%s" % (k, self._names[i]), torch.isfinite(ws[0])))
                    elif grad.numel():
                        self._local_finite.append(("%d/%s" % (k, self._names[i]), _finite_flag(grad)))
                    if self._sampling() is not None:
                        self._sample.take("local/%d" % k, i, grad)
                else:
                    self._locals[-1][i] = self._keep_local(len(self._locals) - 1, i, grad)

    def _prior_tensors(self):
        """Every .grad as the step found it, tensor by tensor (flat_steps.py _prior_flat: laid flat)."""
        whole = self._whole_run()
        sample = self._sampling()
        for j, p in enumerate(self._params):
            if p.grad is None:
                continue
            if sample is not None:
                sample.take("prior", j, p.grad)
            if not self.full and _all_bits_zero(p.grad):  # every bit zero (+0.0): named, not copied
                self._prior_zero.append(j)
            else:
                self._prior[j] = _digest(p.grad) if whole else _cpu_copy(p.grad)
                if self._wsumming():
                    self._wsum.setdefault("prior", {})[j] = _wsums(p.grad)

    def _keep_local(self, k, i, grad):
        """A CPU copy of a local gradient: into the buffer kept for it (written before the next step reuses it)."""
        if self.full:
            return _cpu_copy(grad)
        buf = self._local_pool.get((k, i))
        if buf is None or buf.shape != grad.shape:
            buf = self._local_pool[(k, i)] = _cpu_copy(grad)
        else:
            buf.copy_(grad.detach())
        return buf

    def _whole_run(self):
        """A whole-run step: after the first _full_steps() files (full=False), no local gradient is kept and every
        other tensor is a digest, whatever ddp_check could replay: the ranks' digests are compared with each other."""
        return not self.full and self._written >= self._full_steps()

    def _full_steps(self):
        """How many steps a rank records whole: FULL_STEPS, or as many as fit FULL_BYTES (common.py), at least 2."""
        if getattr(self, "_n_full", None) is None:
            n = sum(p.numel() for p in self._params)
            later = max(0, FULL_BYTES - 16 * n) // max(4 * n, 1)
            self._n_full = FULL_STEPS if self._fsdp is not None else max(2, min(FULL_STEPS, 1 + later))
        return self._n_full

    def _wsumming(self):
        """Whether this step keeps weighted sums (digests.py _wsums): a whole-run step of DDP (not FSDP2's shards)."""
        return self._whole_run() and self._fsdp is None

    def _sampling(self):
        """This whole-run step's sample (made at its first use), or None: a step recorded whole, or FSDP2's shards."""
        if self._sample is None and self._whole_run() and self._fsdp is None:
            fl = self._flat_whole()
            if fl is None:
                self._sample = _Sample(self._step, self._params)
            else:
                from .flat import _FlatSample  # numpy's, which flat.py needs
                self._sample = _FlatSample(fl, self._step)
        return self._sample

    def _full_step(self):
        """Whether this step's file holds every tensor: full=True, or the first step this rank records."""
        return self.full or (not self._steps and self._in_flight is None)

    def _digest_grads(self):
        """.grad after DDP as a digest: ddp_check predicts it bit for bit (Gloo on the CPU; no comm hook, or
        torch's allreduce, fp16 or bf16 compress); elsewhere the values are kept (compared allclose, or needed
        as the optimizer's input where the gradient is not predicted)."""
        if self._whole_run():
            return True
        if self._full_step() or self.backend != "gloo" or any(p.device.type != "cpu" for p in self._params):
            return False
        if self._fsdp is not None:
            return not self._fsdp_layout_safe()["not_modelled"]
        info = _HookInfo(self.ddp, self._powersgd_cache)
        if info.kind in ("fp16_compress_wrapper", "bf16_compress_wrapper"):
            return info.inner == "allreduce"
        return info.kind in (None, "allreduce", "fp16_compress", "bf16_compress")

    def _digest_params(self):
        """Parameters and state after the step as digests, except where ddp_check compares them allclose
        (Adam/AdamW under a torch whose float sqrt is not IEEE's)."""
        if self._whole_run():
            return True
        if self._full_step():
            return False
        return not (type(self.optimizer).__name__ in ("Adam", "AdamW") and self._sqrt_exact is False)

    def _end_of_backward(self):
        # Runs once the backward's graph ran, before the callbacks queued after it: DDP's finalize_backward,
        # queued by the reducer's hooks, which run after ours.
        if self._stopped or self._closed:
            return
        try:
            self._end_of_backward_body()
        except Exception as e:
            self._stop_for(e, "end-of-backward callback")

    def _end_of_backward_body(self):
        with self._lock:
            bw = self._cur_bw
            self._cur_bw = None
        if bw is None:
            return
        if self._hand and self._first_ready is None:  # the order DDP would rebuild its buckets in
            self._first_ready = list(bw["ready"])
        if bw["sync"]:
            if self._first_ready is None:
                self._first_ready = list(bw["ready"])
            if self._recording():
                self._engine.queue_callback(self._after_ddp)

    def _after_ddp(self):
        # Queued by _end_of_backward, so after DDP's finalize_backward: .grad is what DDP left.
        if self._stopped or self._closed:
            return
        try:
            self._after_ddp_body()
        except Exception as e:
            self._stop_for(e, "after-DDP callback")

    def _after_ddp_body(self):
        fl = self._flat_whole()
        if fl is not None:
            return self._after_ddp_flat(fl)
        if self._wsumming():  # the weighted sums of .grad after DDP, which also flag a NaN or an infinity
            ws = self._wsum["grad"] = {i: _wsums(p.grad, absolute=False)
                                       for i, p in enumerate(self._params) if p.grad is not None}
            if ws:
                ok = torch.isfinite(torch.stack([v[0] for v in ws.values()])).tolist()
                self._note_nonfinite("grad", [self._names[i] for i, good in zip(ws, ok) if not good])
        else:
            self._note_nonfinite("grad", _nonfinite((self._names[i], p.grad) for i, p in enumerate(self._params)))
        if self._digest_grads():
            self._grad_crc = {i: _digest(p.grad) for i, p in enumerate(self._params) if p.grad is not None}
            if self._sampling() is not None:
                self._sample.take_all("grad", enumerate(p.grad for p in self._params))
            self._grad_snap = None
        else:
            self._grad_snap = {i: _cpu_copy(p.grad) for i, p in enumerate(self._params) if p.grad is not None}
            self._grad_crc = None
