"""specharness's CLI with the row top-k kernel on or off (off: torch's topk and max serve, as before
5bdb8c5), for an A/B of whole runs in alternated processes:

    python results/smollm2-cpu-epyc-avx2-row-topk/run_switch.py off|on compare ...
"""
import runpy, sys

import specharness.model.accel.row_topk as row_topk

if sys.argv[1] not in ("on", "off"):
    sys.exit("run_switch.py: the first argument is on or off")
if sys.argv[1] == "off":
    row_topk.usable = lambda x: False
sys.argv = ["specharness", *sys.argv[2:]]
runpy.run_module("specharness", run_name="__main__")
