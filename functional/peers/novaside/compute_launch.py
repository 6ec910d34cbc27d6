"""nova-compute for the bed: Nova's own ``nova.cmd.compute.main`` (as the
``nova-compute`` console script runs it), with the bed's virt driver
(``iha_fakevirt``) importable as ``nova.virt.iha_fake``, the only package
nova-compute loads drivers from.

usage: python compute_launch.py --config-file ... (nova-compute's arguments)
"""

import os
import sys

# Nova's start-up first: nova.cmd.compute picks its concurrency backend
# (monkey patching) before anything else of Nova is imported.
from nova.cmd import compute  # noqa: E402

import nova.virt  # noqa: E402

import iha_fakevirt  # noqa: E402  (this script's directory)

sys.modules["nova.virt.iha_fake"] = iha_fakevirt
nova.virt.iha_fake = iha_fakevirt

if __name__ == "__main__":
    sys.argv[0] = os.path.join(os.path.dirname(sys.executable),
                               "nova-compute")
    sys.exit(compute.main())
