"""The enqueue benchmark in steady state: ``bench/enqueue.py --phase steady``.

bash bench/run.sh enqueue_steady
"""

import sys

from bench.enqueue import main

if __name__ == "__main__":
    sys.argv[1:1] = ["--phase", "steady"]
    main()
