#!/usr/bin/python3
"""Goldens for the notebook labs, from each lab's reference.py (the notebook's own PyTorch code):

    /usr/bin/python3 tests/golden/notebooks/make_notebook_goldens.py      (from the repository root)

configs.json maps each golden to the lab and the arguments both the lab and reference.py take.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

# The kernels the committed goldens were computed with, inherited by every reference.py run below:
# OpenBLAS's Prescott kernels (SSE3: every x86-64 CPU since 2005 runs them; an AVX-512 CPU would pick SkylakeX
# and change the last bits of matrix products), one BLAS thread (threaded OpenBLAS adds in another order;
# assigned, so an exported value cannot leak in) and ATen's AVX2 kernels (any CPU with AVX2). The live checks
# in the tests deliberately do not pin: they compare ddplab and torch on the machine's own kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')

# name -> (lab, arguments for reference.py, arguments for the C++ lab)
CONFIGS = {
    '001_ws2': ('001_toy_ddp', ['--world-size', '2'], ['--world-size', '2']),
    '001_ws3_epochs4': ('001_toy_ddp', ['--world-size', '3', '--epochs', '4'], ['--world-size', '3', '--epochs', '4']),
    '001_ws2_notebook_bugs': ('001_toy_ddp', ['--world-size', '2', '--notebook-bugs'], ['--world-size', '2', '--notebook-bugs']),
    '002_ws2': ('002_checkpoint', ['--world-size', '2'], ['--world-size', '2']),
    '003_ws4_epochs2': ('003_trainer', ['--world-size', '4', '--max-epochs', '2'], ['--world-size', '4', '--max-epochs', '2']),
    '003_ws1_epochs1': ('003_trainer', ['--world-size', '1', '--max-epochs', '1'], ['--world-size', '1', '--max-epochs', '1']),
    '004_ws2': ('004_parallelism', ['--world-size', '2', '--dp-devices', '2'],
                ['--world-size', '2', '--dp-devices', '2', '--part', 'all']),
    '004_ws3_dp4': ('004_parallelism', ['--world-size', '3', '--dp-devices', '4'],
                    ['--world-size', '3', '--dp-devices', '4', '--part', 'all']),
    '003_ws2_cross_entropy': ('003_trainer', ['--world-size', '2', '--max-epochs', '1', '--loss', 'ce-probs'],
                              ['--world-size', '2', '--max-epochs', '1', '--loss', 'ce-probs']),
}


def main():
    index = {}
    for name, (lab, ref_args, lab_args) in CONFIGS.items():
        out = os.path.join(HERE, name + '.json')
        ref = os.path.join(ROOT, 'notebooks_ported', lab, 'reference.py')
        subprocess.run([sys.executable, ref] + ref_args + ['--dump', out], check=True, stdout=subprocess.DEVNULL)
        index[name] = {'lab': lab, 'args': lab_args}
        print('wrote', os.path.relpath(out, ROOT))
    fd, tmp = tempfile.mkstemp(dir=HERE)
    with os.fdopen(fd, 'w') as f:
        json.dump(index, f, indent=1)
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(HERE, 'configs.json'))


if __name__ == '__main__':
    main()
