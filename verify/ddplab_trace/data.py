"""data.json: what each DataLoader yielded, from its sampler's indices, mapped to the base dataset."""

import array
import collections
import hashlib
import operator
import sys

from .common import MAX_DATA_INDICES, _jsonable
from .spies import _ITER_LOADER, _ITER_STATE, _SUBSET_MAPS



# ---------------------------------------------------------------------------------------------------------
# data.json: what each DataLoader yielded, from its sampler's indices.
# ---------------------------------------------------------------------------------------------------------
def _subset_chain(ds):
    """(base dataset under every Subset, [indices of each Subset, outermost first])."""
    from torch.utils.data import Subset

    chain = []
    while isinstance(ds, Subset):
        chain.append(ds.indices)
        ds = ds.dataset
    return ds, chain


def _as_int_list(indices):
    if hasattr(indices, "tolist"):
        indices = indices.tolist()
    return [operator.index(j) for j in indices]


def _subset_map(ds):
    """The base index of each index of `ds` (a Subset, maybe of Subsets), cached per dataset."""
    m = _SUBSET_MAPS.get(ds)
    if m is not None:
        return m
    base, chain = _subset_chain(ds)
    try:
        n = len(base)
    except TypeError:
        n = None
    m = _as_int_list(chain[-1])
    if n is not None:
        m = [j + n if j < 0 else j for j in m]
    for indices in reversed(chain[:-1]):
        m = [m[j] for j in _as_int_list(indices)]
    try:
        _SUBSET_MAPS[ds] = m
    except TypeError:  # not weak-referenceable
        pass
    return m


def _describe_sampler(s):
    from torch.utils.data import DistributedSampler

    if isinstance(s, DistributedSampler):
        return {"type": type(s).__name__, "num_replicas": int(s.num_replicas), "rank": int(s.rank),
                "seed": _jsonable(getattr(s, "seed", None)), "shuffle": bool(getattr(s, "shuffle", False)),
                "drop_last": bool(getattr(s, "drop_last", False))}
    return {"type": type(s).__name__}


class _Loader:
    """One DataLoader as this rank iterated it."""

    def __init__(self, lid, loader, it):
        from torch.utils.data import BatchSampler, DistributedSampler, IterableDataset

        ds = loader.dataset if loader is not None else it._dataset
        self.iterable = isinstance(ds, IterableDataset)
        base, chain = _subset_chain(ds)
        self.map = None
        if chain and not self.iterable:
            try:
                self.map = _subset_map(ds)
            except Exception:  # Subset indices that are not integers: no base indices to give
                self.iterable = True
        try:
            base_name = "%s/%d" % (type(base).__name__, len(base))
        except Exception:  # no len
            base_name = type(base).__name__
        digest = None
        if self.map is not None:
            a = array.array("q", self.map)
            if sys.byteorder != "little":  # pragma: no cover
                a.byteswap()
            digest = hashlib.blake2b(a.tobytes(), digest_size=8).hexdigest()
        try:
            subset_len = len(self.map) if self.map is not None else len(ds)
        except Exception:
            subset_len = None
        # The sampler that chose the indices: loader.sampler, unless a batch_sampler of the script's own.
        sampler = loader.sampler if loader is not None else it._index_sampler
        bs = loader.batch_sampler if loader is not None else None
        if bs is not None and not isinstance(bs, BatchSampler):
            desc = {"type": type(bs).__name__, "batch_sampler": True}
            inner = getattr(bs, "sampler", None)
            if isinstance(inner, DistributedSampler):
                desc["sampler"] = _describe_sampler(inner)
            sampler = inner
        else:
            desc = _describe_sampler(sampler)
        self.dist_sampler = sampler if isinstance(sampler, DistributedSampler) else None
        self.json = {"id": lid, "dataset": type(ds).__name__, "base": base_name, "subset_digest": digest,
                     "subset_len": subset_len, "sampler": desc, "epochs": []}


class _IterState:
    __slots__ = ("trace", "loader", "sampler_iter", "epoch", "pending", "__weakref__")

    def __init__(self, trace, loader, sampler_iter, epoch):
        self.trace, self.loader, self.sampler_iter, self.epoch = trace, loader, sampler_iter, epoch
        self.pending = collections.deque()  # index batches fetched (workers prefetch), not yet yielded

class _DataSpy:
    """DDPTrace's part that follows the DataLoader iterators the spies report (data.json)."""

    def _data_on_index(self, it, idx):
        st = _ITER_STATE.get(it)
        if st is None or st.trace is not self or st.sampler_iter is not it._sampler_iter:
            # A new iteration (iter(loader); persistent workers reuse the iterator with a new sampler iterator).
            ref = _ITER_LOADER.get(it)
            loader = ref() if ref is not None else None
            key = loader if loader is not None else it._index_sampler
            try:
                lr = self._loader_by_key.get(key)
            except TypeError:  # not weak-referenceable: by id (kept alive by the iterator meanwhile)
                key = id(key)
                lr = self._loader_by_id.get(key)
            if lr is None:
                lr = _Loader(len(self._loaders), loader, it)
                self._loaders.append(lr)
                if isinstance(key, int):
                    self._loader_by_id[key] = lr
                else:
                    self._loader_by_key[key] = lr
            epochs = lr.json["epochs"]
            ds = lr.dist_sampler
            ep = {"iteration": len(epochs), "epoch": int(ds.epoch) if ds is not None else None,
                  # int64 array: 8 bytes an index (a list of Python ints costs 36)
                  "indices": None if lr.iterable else array.array("q"), "training": False, "first_step": None,
                  "last_step": None}
            epochs.append(ep)
            st = _IterState(self, lr, it._sampler_iter, ep)
            _ITER_STATE[it] = st
        if st.epoch["indices"] is not None:
            st.pending.append(idx)

    def _data_on_yield(self, it):
        st = _ITER_STATE.get(it)
        if st is None or st.trace is not self:
            return
        self._last_epoch = st.epoch
        if not st.pending:
            return
        idx = st.pending.popleft()
        ep = st.epoch
        if ep["indices"] is None or self._data_truncated:
            return
        batch = idx if isinstance(idx, (list, tuple)) else [idx]
        try:
            batch = [operator.index(j) for j in batch]
            m = st.loader.map
            if m is not None:
                batch = [m[j] for j in batch]
        except (TypeError, IndexError):  # keys that are not indices into the dataset
            ep["indices"] = None
            return
        if self._data_count + len(batch) > MAX_DATA_INDICES:
            self._data_truncated = True
            return
        ep["indices"].extend(batch)
        self._data_count += len(batch)

    # ----- the manifest and data.json -----
