import sys

from datagen.pipeline.cli import main

if __name__ == "__main__":  # guard: LLM backends spawn processes that re-import __main__
    sys.exit(main())
