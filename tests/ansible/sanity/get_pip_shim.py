"""Stands in for ansible-test's downloaded get-pip script, which is not reachable offline:
it bootstraps pip with ensurepip, then installs what ansible-test asked for from the index."""
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *args])
