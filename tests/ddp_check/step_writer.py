"""The recorder's step writer (verify/ddplab_trace, _StepWriter) writes exactly the bytes it is given, with
O_DIRECT where the file system takes it and buffered where it does not, and reports a failed write to the
training's thread. Sizes around the page (O_DIRECT writes whole pages, then cuts the file to its length).

    python tests/ddp_check/step_writer.py

One line per case; exit status 0 when every case holds, 1 otherwise.
"""
import errno
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "verify"))
from recorder_internals import T  # noqa: E402

SIZES = [1, 8, 4095, 4096, 4097, 3 * 4096 + 5, 1 << 20, (1 << 20) + 12345]


def chunks_of(size, rng):
    data = bytes(rng.getrandbits(8) for _ in range(min(size, 4096))) * (size // 4096 + 1)
    data = data[:size]
    cut = sorted(rng.randrange(size + 1) for _ in range(3))
    return data, [data[:cut[0]], memoryview(data)[cut[0]:cut[1]], data[cut[1]:cut[2]], data[cut[2]:]]


def write_all(directory, direct, rng, failures):
    w = T._StepWriter()
    if not direct:
        w._direct = False
    for n, size in enumerate(SIZES):
        data, parts = chunks_of(size, rng)
        path = os.path.join(directory, "step%06d.safetensors" % n)
        w.submit(path, parts, size)
        if w.wait() != path:
            failures.append("%s: wait() did not name the file" % path)
        with open(path, "rb") as f:
            got = f.read()
        if got != data:
            failures.append("%s (%d bytes, %s): the file differs from what was given" %
                            (path, size, "O_DIRECT" if direct else "buffered"))
        leftovers = [f for f in os.listdir(directory) if f.endswith(".tmp")]
        if leftovers:
            failures.append("temporary files left: %s" % leftovers)
    return w


def main():
    rng = random.Random(7)
    failures = []
    with tempfile.TemporaryDirectory(prefix="ddplab_writer_", dir=os.environ.get("TEST_TMPDIR")) as d:
        for direct in (True, False):
            sub = os.path.join(d, "direct" if direct else "buffered")
            os.makedirs(sub)
            before = len(failures)
            w = write_all(sub, direct, rng, failures)
            if direct and not w._direct:
                print("note O_DIRECT is refused on %s: the direct case ran buffered" % d)
            if len(failures) == before:
                print("ok   %-9s %d sizes, 1 B to 1 MiB + 12345 B: the files hold the bytes given" %
                      (os.path.basename(sub), len(SIZES)))
        # A file system that refuses O_DIRECT (EINVAL at open): buffered writes from then on, the same bytes.
        real_open = os.open

        def refusing_open(path, flags, *args):
            if flags & os.O_DIRECT:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
            return real_open(path, flags, *args)
        sub = os.path.join(d, "refused")
        os.makedirs(sub)
        os.open = refusing_open
        try:
            before = len(failures)
            w = write_all(sub, True, rng, failures)
        finally:
            os.open = real_open
        if w._direct:
            failures.append("after EINVAL the writer still tries O_DIRECT")
        if len(failures) == before:
            print("ok   refused   O_DIRECT refused (EINVAL): buffered writes, the same bytes")
        # A failing write: raised by wait() in the caller's thread, no file and no temporary file left.
        w = T._StepWriter()
        original = T._StepWriter._write

        def full(self, tmp, arena, total):
            with open(tmp, "wb") as f:  # part of the file written, then the disk is full
                f.write(b"x" * 10)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
        T._StepWriter._write = full
        try:
            path = os.path.join(d, "failing.safetensors")
            w.submit(path, [b"x" * 100], 100)
            try:
                w.wait()
                failures.append("a failed write was not reported by wait()")
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    failures.append("wait() raised %r" % e)
            if os.path.exists(path) or any(f.endswith(".tmp") for f in os.listdir(d)):
                failures.append("a failed write left %s or its temporary file" % path)
        finally:
            T._StepWriter._write = original
        print("ok   failure   reported by wait() in the caller's thread")
    for f in failures:
        print("FAIL " + f)
    print("all cases hold" if not failures else "%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
