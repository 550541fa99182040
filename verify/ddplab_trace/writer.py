"""Step files: safetensors bytes, written whole (temporary name, then rename) by a thread of their own, or
appended to steps.log."""

import errno
import json
import mmap
import os
import struct
import threading

import torch

from .common import _Unrecordable, _dtype_name, _local


def _write_atomically(path, chunks):
    d, base = os.path.split(path)
    tmp = os.path.join(d, "." + base + ".tmp")
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


_PAGE = 4096
SYNC_BYTES = 1 << 20  # step files up to this size are written in the training's thread, without a thread start


class _StepWriter:
    """Writes step files off the training thread, and past the page cache where the file system allows.

    A buffered write of 100 MB into fresh page-cache pages costs ~230 ms of CPU (allocating and filling the
    pages); the same write with O_DIRECT costs ~8 ms of CPU and ~210 ms of waiting on the disk (measured here,
    bench/README.md). So each step's file is copied into a page-aligned staging buffer (two, used in turn:
    the training reuses its own buffers at the next backward) and written from a thread with O_DIRECT, while
    the training goes on. At most one write is in flight; the next step's submit, and close(), wait for it.
    A file system that refuses O_DIRECT (tmpfs) gets buffered writes from the same thread. The thread is not
    a daemon: a script that ends without close() still finishes its last file (temporary name, then rename).
    A small file (SYNC_BYTES) is written buffered in the caller's thread, and a whole-run step is appended to
    steps.log (append): starting a thread, or creating a file, costs more than a small model's step."""

    def __init__(self):
        self._direct = hasattr(os, "O_DIRECT")
        self._arenas = [None, None]
        self._turn = 0
        self._thread = None
        self._result = None  # (path, error) of the write in flight, set by the thread
        self._log = None     # steps.log's descriptor, once a whole-run step was appended

    def _arena(self, size):
        need = (size + _PAGE - 1) // _PAGE * _PAGE
        a = self._arenas[self._turn]
        if a is None or len(a) < need:
            if a is not None:
                a.close()
            a = self._arenas[self._turn] = mmap.mmap(-1, max(need, _PAGE))
        self._turn ^= 1
        return a

    def submit(self, path, chunks, total):
        """Copies the chunks (bytes-likes) into a staging buffer now, and writes them to `path` in the thread; a
        file of at most SYNC_BYTES is written now, in the caller's thread (starting a thread costs more)."""
        if total <= SYNC_BYTES:  # buffered, from one bytes object
            self._run(path, b"".join(memoryview(c).cast("B") for c in chunks), total)
            return
        arena = self._arena(total)
        view = memoryview(arena)
        off = 0
        for c in chunks:
            c = memoryview(c).cast("B")
            view[off:off + len(c)] = c
            off += len(c)
        view.release()
        self._thread = threading.Thread(target=self._run, args=(path, arena, total), name="ddplab_trace writer")
        self._thread.start()

    def append(self, log_path, step, chunks, total):
        """Appends one record to the rank's steps.log: a 16-byte frame (the record's byte count and its step,
        little-endian uint64 each) and the step file's bytes, in one writev. A record cut short (the process
        killed mid-write) is never listed in the manifest, and ddp_check ignores it."""
        try:
            if self._log is None:
                self._log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0),
                                    0o644)
            parts = [struct.pack("<QQ", total, step)] + [memoryview(c).cast("B") for c in chunks]
            self._append_write(parts, 16 + total)
            self._result = (log_path, None)
        except Exception as e:
            self._result = (log_path, e)

    def _append_write(self, parts, total):
        n = os.writev(self._log, parts)
        if n != total:  # a short write (a full disk, a signal): the rest, or the error that stopped it
            rest = b"".join(bytes(p) for p in parts)[n:]
            while rest:
                rest = rest[os.write(self._log, rest):]

    def close(self):
        """Closes steps.log (after the write in flight)."""
        try:
            self.wait()
        finally:
            fd, self._log = self._log, None
            if fd is not None:
                os.close(fd)

    def wait(self):
        """Waits for the write in flight; returns its path, or raises what went wrong in it. None when idle."""
        t, self._thread = self._thread, None
        if t is not None:
            t.join()
        if self._result is None:
            return None
        path, error = self._result
        self._result = None
        if error is not None:
            raise error
        return path

    def done(self):
        return self._thread is None or not self._thread.is_alive()

    def _run(self, path, arena, total):
        d, base = os.path.split(path)
        tmp = os.path.join(d, "." + base + ".tmp")
        try:
            self._write(tmp, arena, total)
            os.replace(tmp, path)
            self._result = (path, None)
        except BaseException as e:  # reported by wait(), in the training's thread; no half-written file left
            self._result = (path, e)
            try:
                os.remove(tmp)
            except OSError:
                pass

    def _write(self, tmp, arena, total):
        # O_DIRECT from a page-aligned staging buffer (an mmap); a small file's bytes are written buffered
        if not (self._direct and isinstance(arena, mmap.mmap) and self._write_direct(tmp, arena, total)):
            with open(tmp, "wb") as f:
                with memoryview(arena) as v:
                    f.write(v[:total])

    def _write_direct(self, tmp, arena, total):
        """O_DIRECT: whole pages from the page-aligned buffer, then the file cut to its length. False where the
        file system refuses it (it is then not tried again)."""
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        except OSError:
            self._direct = False
            return False
        try:
            padded = (total + _PAGE - 1) // _PAGE * _PAGE
            with memoryview(arena) as v:
                off = 0
                while off < padded:
                    n = os.write(fd, v[off:padded])
                    if n <= 0:
                        raise OSError("short write to %s" % tmp)
                    off += n
            os.ftruncate(fd, total)
        except OSError as e:
            os.close(fd)
            if e.errno == errno.EINVAL:  # alignment the device wants is not the page: buffered from now on
                self._direct = False
                return False
            raise
        os.close(fd)
        return True


def _bits(t):
    """A float32 tensor's bits as int32 (one flat view; a copy only where the tensor is not contiguous)."""
    return _local(t).detach().reshape(-1).view(torch.int32)


def _all_bits_zero(t):
    """Every bit of float32 tensor t is zero (+0.0 everywhere; -0.0 is not): the least and greatest of its bits
    as int32 are both 0. One read, no tensor of t's size (bits.any() is about 4x slower on a CPU)."""
    if not t.numel():
        return True
    lo, hi = torch.aminmax(_bits(t))
    return int(lo) == 0 and int(hi) == 0


def _bits_equal(a, b):
    """Bit for bit the same float32 tensors (NaNs and the sign of zero included); b on the CPU."""
    a = _local(a)
    if a.shape != b.shape:
        return False
    if a.device.type != "cpu":
        a = a.cpu()
    return torch.equal(_bits(a), _bits(b))


_HEADERS = {}  # (name, dtype, shape) of each tensor -> the header's text up to its metadata, and the data size


def _safetensors_parts(tensors, metadata_text):
    """(header bytes with its 8-byte length, data size, total size) for [(name, cpu float32 tensor)]
    (float64 for the weighted sums, "wsum/..."). Whole-run steps repeat one list of names and shapes: its part
    of the header is kept (the same bytes json.dumps gives), and only the metadata is encoded each step."""
    key = tuple((name, t.dtype, t.shape, t.layout, t.is_cpu) for name, t in tensors)  # (is_cpu: device.type's cost /8)
    known = _HEADERS.get(key)
    if known is None:
        header = {}
        offset = 0
        for name, t in tensors:
            f64 = name.startswith("wsum/") and t.dtype == torch.float64  # the weighted sums: float64 by design
            if (t.dtype != torch.float32 and not f64) or t.layout != torch.strided or t.device.type != "cpu":
                raise _Unrecordable("tensor '%s' is %s %s on %s, and the trace format holds dense float32 only "
                                    "(an unknown tensor kind)" % (name, str(t.layout).replace("torch.", ""),
                                                                  _dtype_name(t.dtype), t.device.type))
            n = t.numel() * (8 if f64 else 4)
            header[name] = {"dtype": "F64" if f64 else "F32", "shape": list(t.shape),
                            "data_offsets": [offset, offset + n]}
            offset += n
        header["__metadata__"] = {"ddplab": ""}
        text = json.dumps(header, separators=(",", ":"))
        known = (text[:-len('""}}')], offset)
        if len(_HEADERS) > 64:  # a run whose tensors change from step to step
            _HEADERS.clear()
        _HEADERS[key] = known
    prefix, offset = known
    text = (prefix + json.dumps(metadata_text) + "}}").encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # safetensors pads the header to a multiple of 8 bytes
    head = len(text).to_bytes(8, "little") + text
    return head, offset, len(head) + offset
