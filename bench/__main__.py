"""`python -m bench`: the benchmark's command line (bench/main.py)."""

import sys

from bench.main import main

sys.exit(main())
