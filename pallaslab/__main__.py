import sys

from pallaslab.cli import main

sys.exit(main())
