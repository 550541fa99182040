"""optimizer.step(): what the step saw and did, and the step file."""

import json
import os
import time

import torch

from .common import FULL_STEPS, MANIFEST_SECONDS, _cpu_copy, _dtype_name, _jsonable, _number, _tensor_bytes, _why
from .digests import WSUM_COLUMNS, _digest, _nonfinite, _wsums
from .sample import SLOTS
from .spies import _JOIN_EVENTS
from .writer import _bits_equal, _safetensors_parts


class _Step:
    """DDPTrace's part around optimizer.step(): the snapshot before it, the records after it, and the step
    file handed to the writer."""

    def _snapshot_before(self):
        opt = self.optimizer
        if self._colls:
            self._collectives_at_step()
        # Digests (full=False): parameters equal to where the last recorded step left them, and a .grad equal to
        # what DDP left, are named, not copied.
        follows = not self.full and self._last_after_step == self._step - 1 and self._last_after_crc is not None
        whole = self._whole_run()
        sample = self._sampling()
        fl = self._flat_whole()
        if fl is not None:
            params, grads = self._before_flat(fl, follows)
        else:
            params, grads = self._before_tensors(follows, whole, sample)
        # The state before this step is what the optimizer left after the previous one: a digest where ddp_check
        # predicted that step (it replays the optimizer from the first recorded step's state).
        state_digest = (follows and self._digest_params()) or whole
        state, steps, skipped, flat_state = [], {}, [], []
        versions = self._state_versions() if whole else None
        saved_step, saved = getattr(self, "_saved_versions", (None, None))
        changed = []
        if whole and saved_step == self._step - 1 and versions != saved:
            changed = ["%s/%s" % (self._names[i], k) for i, k in
                       [ik for ik in versions if saved.get(ik) != versions[ik]] + [ik for ik in saved if ik not in versions]]
        for i, p in enumerate(self._params):
            st = opt.state.get(p) if hasattr(opt.state, "get") else None
            if not st:
                continue
            for k, v in st.items():
                if k == "step":
                    steps[self._names[i]] = _number(v)
                elif isinstance(v, torch.Tensor) and v.dim() > 0:
                    if v.dtype != torch.float32 or v.layout != torch.strided:
                        skipped.append({"name": self._names[i], "key": str(k), "dtype": _dtype_name(v.dtype)})
                    elif fl is not None:
                        flat_state.append((i, k, v))
                    else:
                        if sample is not None:
                            sample.take("state/%s" % k, i, v)
                        state.append(("state/%s/%s" % (self._names[i], k), _digest(v) if state_digest else _cpu_copy(v)))
        if flat_state:
            state = [("state/%s/%s" % (self._names[i], k), d) for i, k, d in self._state_flat(fl, flat_state)]
        lr = [float(_number(g["lr"])) for g in opt.param_groups]
        # Every hyperparameter as step() will read it (a scheduler or a loop may have changed momentum, betas,
        # weight_decay, ... since DDPTrace was made): per group, the keys whose value differs from the manifest's.
        groups = []
        for g, first in zip(opt.param_groups, self._groups):
            now = {k: _jsonable(v) for k, v in g.items() if k != "params"}
            groups.append({k: v for k, v in now.items() if first.get(k, None) != v})
        bufs = [("buffer/" + n, _cpu_copy(b)) for n, b in self._float_buffers]
        ints = {}
        for n, b in self._int_buffers:
            ints[n] = int(b.item()) if b.numel() == 1 else b.detach().cpu().tolist()
        self._before = {"params": params, "grads": grads, "state": state, "steps": steps, "lr": lr, "groups": groups,
                        "state_changed": changed,
                        "num_groups": len(opt.param_groups),
                        "buffers": bufs, "ints": ints, "skipped": skipped}

    def _before_tensors(self, follows, whole, sample):
        """_snapshot_before's parameters and .grad, tensor by tensor: "previous", "grad", digests or copies."""
        if sample is not None:
            sample.take_all("param_before", enumerate(self._params))
        if follows and self._params and all(_digest(p) == self._last_after_crc[i] for i, p in enumerate(self._params)):
            params = "previous"
        elif whole:  # changed outside the step: its digest, and whether it is finite
            self._note_nonfinite("param_before", _nonfinite((self._names[i], p) for i, p in enumerate(self._params)))
            params = {i: _digest(p) for i, p in enumerate(self._params)}
        else:
            params = {i: _cpu_copy(p) for i, p in enumerate(self._params)}
        live = {i: p.grad for i, p in enumerate(self._params) if p.grad is not None}
        if self.full or not live:
            same = False
        elif self._grad_crc is not None:
            same = set(live) == set(self._grad_crc) and all(_digest(g) == self._grad_crc[i] for i, g in live.items())
        else:
            snap = self._grad_snap or {}
            same = set(live) == set(snap) and all(_bits_equal(g.detach(), snap[i]) for i, g in live.items())
        if sample is not None:
            sample.take_all("grad_step", live.items())
        if not same and whole:
            self._note_nonfinite("grad_step", _nonfinite((self._names[i], g) for i, g in live.items()))
            grads = {i: _digest(g) for i, g in live.items()}
            if self._wsumming():  # against .grad after DDP's: one factor (a clip) or another change
                self._wsum["grad_step"] = {i: _wsums(g) for i, g in live.items()}
        else:
            grads = "grad" if same else {i: _cpu_copy(g) for i, g in live.items()}
        if params != "previous" and not whole:
            self._note_nonfinite("param_before", _nonfinite((self._names[i], t) for i, t in params.items()))
        if grads != "grad" and not whole:
            self._note_nonfinite("grad_step", _nonfinite((self._names[i], t) for i, t in grads.items()))
        return params, grads

    def _wsum_tensors(self):
        """[("wsum/<kind>", float64 [parameters, 3])]: each parameter's weighted sums S and A and its sum of
        squares Q, of the prior .grad, each backward's local gradient and .grad after DDP (A not kept: NaN); NaN
        where it has no such tensor."""
        out = []
        for kind in sorted(self._wsum):
            got = self._wsum[kind]
            if isinstance(got, tuple):  # laid flat (flat_steps.py): [parameters, 3] of its own, and which it holds
                rows, present = got
                rows[~present] = float("nan")
                out.append(("wsum/" + kind, torch.from_numpy(rows)))
                continue
            vals = torch.full((len(self._params), 3), float("nan"), dtype=torch.float64)
            if got:
                vals[list(got)] = torch.stack(list(got.values())).cpu()  # one transfer from a GPU
            out.append(("wsum/" + kind, vals))
        return out

    def _state_tensors(self):
        """(parameter index, key, tensor) of the optimizer's per-parameter state tensors (not the 0-dim step)."""
        states = self.optimizer.state
        for i, p in enumerate(self._params):
            st = states.get(p) if hasattr(states, "get") else None
            for k, v in (st or {}).items():
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    yield i, k, v

    def _state_versions(self):
        """{(parameter index, key): (id, version)} of the optimizer's state tensors: an edit in place bumps a
        tensor's version counter, a load replaces the tensor. Costs nothing per element."""
        return {(i, k): (id(v), v._version) for i, k, v in self._state_tensors()}

    def _snapshot_before_safe(self):
        if self._stopped:
            return
        try:
            with torch.no_grad():
                self._snapshot_before()
        except Exception as e:
            self._before = None
            self._stop_for(e, "optimizer.step wrapper")

    def _step_wrapper(self, *args, **kwargs):
        if self._stopped or self._closed:
            return self._original_step(*args, **kwargs)
        call_args, call_kwargs, rec = args, kwargs, False
        try:
            rec, call_args, call_kwargs = self._before_step(args, kwargs)
        except Exception as e:
            self._stop_for(e, "optimizer.step wrapper")
            call_args, call_kwargs = args, kwargs
        try:
            out = self._original_step(*call_args, **call_kwargs)
        except BaseException:  # the script's own error: passes through unchanged
            try:
                self._reset_step()
            except Exception:
                pass
            raise
        if not self._stopped:
            try:
                self._after_step(rec)
            except Exception as e:
                self._stop_for(e, "optimizer.step wrapper")
        return out

    def _before_step(self, args, kwargs):
        # The segment of uneven steps: Join contexts entered and exited so far, and the step's index in it.
        c = _JOIN_EVENTS[0] - self._join_base
        if c != self._seg_c:
            self._seg_c, self._seg_k = c, 0
        ep = self._last_epoch  # the loader iteration that fed this step
        if ep is not None:
            if ep["first_step"] is None:
                ep["first_step"] = self._step
            ep["last_step"] = self._step
        rec = self._recording()
        if not rec:
            return rec, args, kwargs
        closure = kwargs.get("closure", args[0] if args else None)
        if closure is None:
            self._snapshot_before_safe()
            return rec, args, kwargs
        taken = []

        def traced_closure(*cargs, **ckwargs):
            out = closure(*cargs, **ckwargs)
            if not taken:
                taken.append(True)
                self._snapshot_before_safe()
            return out

        if "closure" in kwargs:
            return rec, args, dict(kwargs, closure=traced_closure)
        return rec, (traced_closure,) + tuple(args[1:]), kwargs

    def _after_step(self, rec):
        if rec and self._before is not None:
            with torch.no_grad():
                self._write_step()
        else:
            if self._nonfinite_first is None:  # a step not recorded: its parameters' health still is
                with torch.no_grad():
                    bad = _nonfinite(zip(self._names, self._params))
                if bad:
                    self._nonfinite_first = {"step": self._step, "kind": "param_after", "name": bad[0]}
                    self._write_manifest_safe(False)
            if self._in_flight is not None and self._writer.done():
                self._finish_write()  # with every=K: the manifest lists a finished file at the next step
        self._step += 1
        self._seg_k += 1
        self._reset_step()

    def _finish_write(self):
        """Waits for the file in flight; lists its step in the manifest once it is whole. False when it failed
        (recording then stops, named at that step)."""
        step, self._in_flight = self._in_flight, None
        if step is None:
            return True
        try:
            self._writer.wait()
        except Exception as e:
            self._stop(_why(e, "step writer"), at_step=step)
            return False
        self._steps.append(step)
        # The manifest lists it now for the first FULL_STEPS steps, then at most once a MANIFEST_SECONDS: a
        # rewrite costs more than a small model's step (close(), a stop and the exit handler always write).
        if len(self._steps) <= FULL_STEPS or time.monotonic() - self._manifest_at >= MANIFEST_SECONDS:
            self._write_manifest_safe(False)
        return True

    def _write_step(self):
        if not self._finish_write() or self._stopped:  # the manifest listing the last file may have failed
            return
        b = self._before
        names = self._names
        tensors = []
        for k, loc in enumerate(self._locals):
            for i in self._backwards[k]["ready"]:  # each parameter is reached once per backward
                if i in loc:
                    tensors.append(("local/%d/%s" % (k, names[i]), loc[i]))
        self._note_nonfinite("local", _nonfinite((key[len("local/"):], t) for key, t in tensors))
        if self._local_finite:  # whole-run steps: the flags cross to the host once per step
            ok = torch.stack([f.to("cpu") for _, f in self._local_finite]).tolist()
            self._note_nonfinite("local", [n for (n, _), good in zip(self._local_finite, ok) if not good])
        fl = self._flat_whole()
        flat_after = None
        if fl is not None:  # laid flat: the local gradients' sums and flags, the parameters' digests and flags
            self._locals_flat_done(fl)
            flat_after = self._after_flat(fl)
        else:
            self._note_nonfinite("param_after", _nonfinite(zip(names, self._params)))
        elided = {}
        crc = {}  # digests of what ddp_check predicts, in place of the tensors (whole-run steps: of every tensor)

        def keep(key, v):  # a digest (an int) or a tensor
            if isinstance(v, int):
                crc[key] = v
            else:
                tensors.append((key, v))

        for i in sorted(self._prior):
            keep("prior/" + names[i], self._prior[i])
        if self._prior_zero:
            elided["prior_zero"] = [names[i] for i in self._prior_zero]
        if self._grad_snap is not None:
            for i in sorted(self._grad_snap):
                tensors.append(("grad/" + names[i], self._grad_snap[i]))
        elif self._grad_crc is not None:
            for i in sorted(self._grad_crc):
                crc["grad/" + names[i]] = self._grad_crc[i]
        if b["grads"] == "grad":
            elided["grad_step"] = "grad"
        else:
            for i in sorted(b["grads"]):
                keep("grad_step/" + names[i], b["grads"][i])
        if b["params"] == "previous":
            elided["param_before"] = "previous"
        else:
            for i in range(len(names)):
                keep("param_before/" + names[i], b["params"][i])
        if self._digest_params():
            after_crc = flat_after if flat_after is not None else [_digest(p) for p in self._params]
            for i in range(len(names)):
                crc["param_after/" + names[i]] = after_crc[i]
        else:
            after = [_cpu_copy(p) for p in self._params]
            after_crc = None if self.full else [_digest(t) for t in after]
            for i in range(len(names)):
                tensors.append(("param_after/" + names[i], after[i]))
        for key, v in b["state"]:
            keep(key, v)
        tensors.extend(b["buffers"])
        # The parameters DDP does not reduce: a digest each step, and their values once they have changed.
        outside = {}
        for name, p in self._outside:
            d = _digest(p)
            outside[name] = d
            if self._outside_first.setdefault(name, d) != d or self.full:
                tensors.append(("outside/" + name, _cpu_copy(p)))
        sample = self._sample
        if sample is not None:  # what the step left, for the replay of the sample
            if fl is None:  # (laid flat: taken by _after_flat)
                sample.take_all("param_after", enumerate(self._params))
                for i, k, v in self._state_tensors():
                    if k != "step" and v.dtype == torch.float32:
                        sample.take("state_after/%s" % k, i, v)
            sampled, absent = sample.kinds()
            tensors.extend(sampled)
        tensors.extend(self._wsum_tensors())
        colls = None
        if self._hand or self._colls:
            colls, coll_tensors = self._collective_parts()
            tensors.extend(coll_tensors)
        meta = {
            "step": self._step, "rank": self.rank, "run_id": self.run_id,
            "segment": [self._seg_c, self._seg_k],
            "backwards": [dict(bw, ready=list(bw["ready"])) for bw in self._backwards],
            "inputs": self._inputs,
            "state_steps": b["steps"],
            "lr": b["lr"],
            "group_changes": b["groups"],
            "zero_grads": list(self._zero_grads),
            "num_groups": b["num_groups"],
            "int_buffers": b["ints"],
        }
        if self._step_join is not None:
            meta["join"] = self._step_join
        if b["skipped"]:
            meta["state_skipped"] = b["skipped"]
        if elided:
            meta["elided"] = elided
        meta["nonfinite"] = self._nf  # {} : every tensor of the step was finite
        if outside:
            meta["outside"] = outside
        if self._whole_run():
            meta["mode"] = "digests"  # a whole-run step: no local gradients, digests of the rest
        if sample is not None:
            meta["sample"] = {"slots": SLOTS, "absent": absent}
        if self._wsum:
            meta["wsum"] = {"columns": WSUM_COLUMNS}
        if colls is not None:
            meta["collectives"] = colls
        if b["state_changed"]:
            meta["state_changed"] = sorted(b["state_changed"])
        meta["digest"] = "fold64"  # how "crc32" below and ddp_check's digests of this file's tensors are taken
        if crc:
            meta["crc32"] = crc  # the key's name predates fold64
        head, data_size, total = _safetensors_parts(tensors, json.dumps(meta, separators=(",", ":")))
        if self._bytes + total > self.max_bytes:
            self._stop("size bound %d bytes reached" % self.max_bytes, " (use every=K or max_bytes=...)")
            return
        chunks = [head] + [_tensor_bytes(t) for _, t in tensors]
        if self._whole_run():  # a few KiB: appended to steps.log (a file per step costs more than the step)
            self._writer.append(os.path.join(self.dir, "steps.log"), self._step, chunks, total)
        else:
            self._writer.submit(os.path.join(self.dir, "step%06d.safetensors" % self._step), chunks, total)
        self._in_flight = self._step
        self._written += 1
        self._bytes += total
        self._last_after_crc, self._last_after_step = after_crc, self._step
        if self._whole_run():  # what the next step's state is compared with (from the last full step on)
            self._saved_versions = (self._step, self._state_versions())

    # ----- spies' reports -----
    def _on_averaged(self, group_size):
        self._averaging.append({"after_step": self._step - 1, "group_size": int(group_size)})
