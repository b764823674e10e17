"""pytest for mutmut: exit 1 on any failure. mutmut 2 counts only status 1 as a kill, so a mutant that breaks
collection (status 2) would otherwise "survive"; running pytest in this process (no shell in between) also lets
mutmut's timeout kill the tests themselves."""

import sys

import pytest

if __name__ == "__main__":
    sys.exit(0 if pytest.main(sys.argv[1:]) == 0 else 1)
