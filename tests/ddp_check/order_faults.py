"""Faults injected into the recorder's order probes (verify/ddplab_trace, measure_order) on one rank of a
3-rank Gloo run of scripts/measured_order.py; the test (order_test) runs each traced and untraced:
  decode  rank 1's decoding fails (a MemoryError in _probe_maxpos): it still takes part in every all-reduce, its
          sizes are written without an order and with why, one stderr line
  sizes   rank 2 cannot tell its bucket sizes (_order_sizes raises): the ranks agree that none measures, one
          stderr line
Either way the training ends bit for bit as untraced, and ddp_check still checks the run (Gloo's order is known).

    python3 tests/ddp_check/order_faults.py --fault decode|sizes --out RUN_DIR [--final FILE.json]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts"))
import common  # noqa: E402  (puts verify/ on sys.path)
from recorder_internals import T  # noqa: E402
import measured_order  # noqa: E402


def main(rank, world_size, args):
    def boom(*a, **k):
        raise MemoryError("injected")

    if args.fault == "decode" and rank == 1:
        T._probe_maxpos = boom
    if args.fault == "sizes" and rank == 2:
        T.DDPTrace._order_sizes = boom
    measured_order.main(rank, world_size, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4,
                                          extra=lambda p: p.add_argument("--fault", choices=["decode", "sizes"])))
