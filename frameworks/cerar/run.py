"""`python -m cerar.run ...` and `import cerar.run`: cerarrun's module by its first name, which
job scripts and tools use; the launcher itself is cerar.runner.cli."""
import sys

from cerar.runner import cli

if __name__ == "__main__":
    sys.exit(cli.main())
sys.modules[__name__] = cli  # `import cerar.run` is the launcher's module itself
