"""`python -m commands`: the `rubricrl` command, for launchers that start a module (`accelerate launch`, `torchrun`)."""

import sys

from commands.main import main

sys.exit(main())
