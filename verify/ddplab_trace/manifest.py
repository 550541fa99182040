"""manifest.json and the measured addition order."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from .common import FORMAT, VERSION, _Unrecordable, _dtype_name, _why
from .digests import _param_entry
from .hooks import _HookInfo
from .order import _ORDER_SEED, _measure_order
from .writer import _write_atomically


class _Manifest:
    """DDPTrace's part that describes the run: bucket layout, DDP's options, FSDP2's groups, the manifest and
    data.json, and the addition order measured at close()."""

    def _bucket_layout(self):
        """torch's buckets as lists of recorded parameter indices (unchecked ones left out, emptied buckets
        dropped), or None where torch does not expose them."""
        try:
            buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
            layout = []
            for b in buckets:
                idx = []
                for p in b.parameters():
                    if id(p) in self._unchecked_ids:
                        continue
                    if id(p) not in self._index:
                        return None
                    idx.append(self._index[id(p)])
                if idx:
                    layout.append(idx)
            return layout
        except Exception:
            return None

    def _ddp_options(self):
        """The manifest's "ddp" options and torch's bucket layouts (DDP, not FSDP2)."""
        ddp = self.ddp
        info = _HookInfo(ddp, self._powersgd_cache)
        state = dict(info.fields)
        start = self._hook_at_start
        if info.kind is not None and start is not None and start.name == info.name:
            # fields only readable at the start: the seed; post-local SGD's iter at DDPTrace()
            state = dict(start.fields, **state)
            if "iter" in start.fields:
                state["iter"] = start.fields["iter"]
        static = getattr(ddp, "static_graph", None)
        if static is None:
            static = getattr(ddp, "_static_graph", False)
        ddp_opts = {
            "bucket_cap_mb": ddp.bucket_bytes_cap / 2.0 ** 20,
            "broadcast_buffers": bool(ddp.broadcast_buffers),
            "find_unused_parameters": bool(ddp.find_unused_parameters),
            "gradient_as_bucket_view": bool(ddp.gradient_as_bucket_view),
            "static_graph": bool(static),
            "comm_hook": info.kind,
            "comm_hook_state": state,
        }
        if info.name is not None:
            ddp_opts["comm_hook_name"] = info.name
            ddp_opts["comm_hook_module"] = info.module
        if info.kind in ("fp16_compress_wrapper", "bf16_compress_wrapper"):
            ddp_opts["comm_hook_inner"] = info.inner
        if self._first_bucket_bytes is not None:
            ddp_opts["first_bucket_bytes"] = self._first_bucket_bytes
        buckets = {}
        if self._buckets_initial is not None:
            buckets["initial"] = self._buckets_initial
        if self._buckets_rebuilt is None and getattr(ddp, "_has_rebuilt_buckets", False) and not self._stopped:
            self._buckets_rebuilt = self._bucket_layout()  # once: it allocates a zero copy of every gradient
        if self._buckets_rebuilt is not None:
            buckets["rebuilt"] = self._buckets_rebuilt
        return ddp_opts, buckets

    def _manifest(self, complete):
        if self._not_recorded:  # a model it cannot record: the reason, and nothing else
            return {"format": FORMAT, "version": VERSION, "run_id": self.run_id, "rank": self.rank,
                    "world_size": self.world_size, "backend": self.backend, "torch_version": torch.__version__,
                    "complete": bool(complete), "not_recorded": self._not_recorded, "every": self.every, "steps": []}
        ddp_opts, buckets = self._ddp_options() if self._fsdp is None else (None, {})
        optimizer = {"class": type(self.optimizer).__name__, "param_groups": self._groups}
        optimizer.update(self._opt_coverage)
        if self._shard is not None:
            optimizer["sharded"] = self._shard
        manifest = {
            "format": FORMAT, "version": VERSION,
            "run_id": self.run_id,
            "rank": self.rank, "world_size": self.world_size, "backend": self.backend, "device": self.device,
            "torch_version": torch.__version__,
            "complete": bool(complete),
            "closed_at_exit": bool(getattr(self, "_closed_at_exit", False)),
            "exit_error": getattr(self, "_exit_error", "") or None,
            "stopped": self._stopped_info,
            "sqrt_exact": self._sqrt_exact,
            "every": self.every,
            "steps": list(self._steps),
            "params": [_param_entry(n, p) for n, p in zip(self._names, self._params)],
            "unchecked_params": self._unchecked,
            "outside_params": self._outside_info,
            "nonfinite_first": self._nonfinite_first,
            "buffers": [{"name": n, "shape": list(b.shape), "dtype": "float32"} for n, b in self._float_buffers],
            "unchecked_buffers": self._unchecked_buffers,
            "optimizer": optimizer,
            "first_ready_order": self._first_ready,
            "averaging": list(self._averaging),
            "join": self._join_seen,
            "lightning": self._lightning,
            "framework": self._framework,
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith("NCCL_") or k == "TORCH_DISTRIBUTED_DEBUG"},
        }
        if ddp_opts is not None:
            manifest["ddp"] = ddp_opts
        else:
            manifest["fsdp"] = self._fsdp_layout_safe()
        if self._hand:  # no DDP: "ddp" holds its defaults, what ddp_check replays beside the script's own sync
            manifest["sync"] = "hand"
            if self._collective_error is not None:
                manifest["collective_error"] = self._collective_error
        if buckets:
            manifest["buckets"] = buckets
        if self._order is not None:
            manifest["allreduce_order"] = self._order
        return manifest

    def _fsdp_layout_safe(self):
        """The layout; where reading it fails (after one good read), the last good one and one line: the steps
        recorded so far stay checkable."""
        try:
            self._fsdp_last = self._fsdp_layout()
        except Exception as e:
            if getattr(self, "_fsdp_last", None) is None:
                raise
            self._stop_for(e, "manifest writer")
        return self._fsdp_last

    def _fsdp_layout(self):
        """The manifest's "fsdp" (docs/trace_format.md): FSDP2's parameter groups in their reduce-scatter order, each
        parameter's full shape and shard dim, and what ddp_check does not model in this run (its gradients are then
        compared by nothing but the optimizer step)."""
        full, groups, not_modelled = [None] * len(self._names), [], []

        def say(why):
            if why not in not_modelled:
                not_modelled.append(why)

        for name, _, g in self._fsdp.groups:
            idx, reduce = [], set()
            for fp in g.fsdp_params:
                i = self._index.get(id(fp.sharded_param))
                if i is None:
                    continue
                mp = getattr(fp, "mp_policy", None)
                param_dtype, reduce_dtype = getattr(mp, "param_dtype", None), getattr(mp, "reduce_dtype", None)
                if param_dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
                    say("mixed precision (MixedPrecisionPolicy(param_dtype=%s))" % _dtype_name(param_dtype))
                # The dtype the gradient is reduced (and accumulated) in. torch 2.15 says it once FSDP is initialised
                # (the first forward): unsharded_grad_dtype, reduce_dtype or else the parameter's own. Before 2.15,
                # reduce_dtype=None meant param_dtype (2.15's MixedPrecisionPolicy docstring says so).
                try:
                    reduce_dtype = fp.unsharded_grad_dtype or torch.float32
                except AttributeError:
                    reduce_dtype = reduce_dtype or (None if hasattr(type(fp), "unsharded_grad_dtype") else param_dtype)
                    reduce_dtype = reduce_dtype or torch.float32
                if reduce_dtype not in (torch.float32, torch.bfloat16, torch.float16):
                    say("a %s reduce-scatter (MixedPrecisionPolicy(reduce_dtype=...))" % _dtype_name(reduce_dtype))
                reduce.add(_dtype_name(reduce_dtype))
                dim = int(getattr(getattr(fp, "fsdp_placement", None), "dim", 0) or 0)
                if getattr(fp, "offload_to_cpu", False):
                    say("CPU offload (CPUOffloadPolicy)")
                full[i] = {"name": self._names[i], "shape": list(fp.sharded_param.shape), "shard_dim": dim}
                idx.append(i)
            mesh = type(getattr(g, "mesh_info", None)).__name__
            if mesh != "FSDPMeshInfo":
                say("HSDP (%s: a 2-D device mesh, reduce-scatter then all-reduce)" % mesh)
            if getattr(g, "gradient_divide_factor", None) is not None:
                say("set_gradient_divide_factor")
            if getattr(g, "force_sum_reduction_for_comms", False):
                say("set_force_sum_reduction_for_comms")
            if len(reduce) > 1:
                say("reduce dtypes that differ within a parameter group")
            if idx:
                groups.append({"module": name, "params": idx, "reduce_dtype": reduce.pop()})
        if self.backend != "gloo" or self.device != "cpu":
            say("the reduce-scatter of %s on %s (only Gloo's on the CPU is modelled)" % (self.backend, self.device))
        for i, f in enumerate(full):
            if f is None:
                raise _Unrecordable("'%s' is in none of FSDP's parameter groups" % self._names[i])
        layout = {"params": full, "groups": groups, "not_modelled": not_modelled}
        mesh = getattr(self._fsdp.groups[0][2], "mesh_info", None) if self._fsdp.groups else None
        if getattr(mesh, "shard_mesh_size", None) is not None:  # HSDP shards within a group of the mesh's ranks
            layout["shard_world_size"] = int(mesh.shard_mesh_size)
            layout["shard_rank"] = int(mesh.shard_mesh_rank)
        return layout

    def _data_json(self):
        return {"loaders": [lr.json for lr in self._loaders], "truncated": self._data_truncated}

    def _write_manifest(self, complete):
        if self._nowhere:
            return
        self._manifest_at = time.monotonic()
        # Indented only when final: mid-run (once a second) json's C encoder, which takes no indent, writes it.
        text = json.dumps(self._manifest(complete), indent=1 if complete else None).encode("utf-8") + b"\n"
        # data.json: rewritten with every manifest while small; past 10,000 indices only when they grew by a
        # quarter since the last write, so that the writes stay linear in the run (a course run's 2000 steps hold
        # 128,000 indices a rank: a rewrite each second cost more than the steps' own records).
        last_count = self._data_written
        if complete or self._data_count <= 10_000 or self._data_count - last_count >= last_count // 4:
            data = json.dumps(self._data_json(), separators=(",", ":"), default=list).encode("utf-8") + b"\n"
            _write_atomically(os.path.join(self.dir, "data.json"), [data])
            self._data_written = self._data_count
        _write_atomically(os.path.join(self.dir, "manifest.json"), [text])

    def _write_manifest_safe(self, complete):
        try:
            self._write_manifest(complete)
        except Exception as e:
            self._stop_for(e, "manifest writer")  # a no-op once stopped

    # ----- the end -----

    def _order_sizes(self):
        """The distinct sizes of the buckets DDP all-reduced (both layouts), or None where unknown."""
        if self._buckets_rebuilt is None and getattr(self.ddp, "_has_rebuilt_buckets", False):
            self._buckets_rebuilt = self._bucket_layout()
        layouts = [b for b in (self._buckets_initial, self._buckets_rebuilt) if b]
        if not layouts:
            return None
        return sorted({sum(int(self._params[i].numel()) for i in bucket) for layout in layouts for bucket in layout})

    def _measure_order_safe(self):
        want = self.measure_order is True or (self.measure_order == "auto" and self.backend != "gloo")
        if not want or self.world_size < 3 or self._not_recorded or self._fsdp is not None or self._hand:  # the same on every rank
            return
        t0 = time.monotonic()
        try:
            pg = getattr(self.ddp, "process_group", None)
            device = self._params[0].device if self._params else (
                torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu"))
            sizes, buf = None, None
            try:
                sizes = self._order_sizes()
                buf = torch.empty(max(sizes), dtype=torch.float32, device=device) if sizes else None
            except Exception as e:  # this rank says no: none measures (below), and this line says why
                sizes = None
                sys.stderr.write("ddplab_trace: the all-reduce order was not measured: %s\n"
                                 % _why(e, "order probes"))
            # The ranks agree first (every rank makes this call whatever it found): all measure, or none does.
            mine = [1.0 if sizes and buf is not None else 0.0, float(len(sizes or [])), float(sum(sizes or []))]
            agree = torch.tensor(mine + [-v for v in mine[1:]], dtype=torch.float64, device=device)
            dist.all_reduce(agree, op=dist.ReduceOp.MIN, group=pg)
            a = agree.cpu().tolist()
            if a[0] != 1.0 or a[1] != -a[3] or a[2] != -a[4]:
                self._order = {"measured": False, "why": "the ranks did not all know the same bucket sizes"}
                return
            N = dist.get_world_size(pg)
            rank = dist.get_rank(pg)
            sizes_out, calls = _measure_order(lambda t: dist.all_reduce(t, group=pg), sizes, N, rank, device, buf)
            failed = [e for e in sizes_out if e["runs"] is None and e.get("why", "").startswith("internal error")]
            if failed:  # this rank's own trouble (the others' entries are whole): one line
                sys.stderr.write("ddplab_trace: the all-reduce order of %d size(s) was not measured on this rank: "
                                 "%s\n" % (len(failed), failed[0]["why"]))
            self._order = {"measured": True, "seed": _ORDER_SEED, "sizes": sizes_out, "all_reduces": calls,
                           "seconds": round(time.monotonic() - t0, 3)}
        except Exception as e:  # one line; the trace itself is whole
            self._order = {"measured": False, "why": _why(e, "measuring the all-reduce order")}
            sys.stderr.write("ddplab_trace: the all-reduce order was not measured: %s\n" % _why(e, "close()"))
