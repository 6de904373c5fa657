"""python -m sandbox demo --charm DIR [--resource TARBALL]"""
import sys

from sandbox import demo

if __name__ == "__main__":
    if sys.argv[1:2] != ["demo"]:
        sys.exit(__doc__)
    sys.exit(demo.main(sys.argv[2:]))
