"""The install's one step beyond pyproject.toml: gitsess's two programs, built with the
extension's compiler next to their Python modules (in the checkout for an editable install).

- `gitsess/overlay/fsmonitor_hook.c` as `fsmonitor-hook`: without a compiler the install goes
  on, and git runs the Python hook.
- `gitsess/overlay/guard.c` as `gitsess-guard`, which every daemon starts: required.
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_ext import build_ext

PACKAGE = os.path.join("gitsess", "overlay")
# (source, program, required): the names are fsmonitor_hook.COMPILED's and guard.COMPILED's.
PROGRAMS = (
    ("fsmonitor_hook.c", "fsmonitor-hook", False),
    ("guard.c", "gitsess-guard", True),
)


class BuildWithPrograms(build_ext):
    def run(self) -> None:
        super().run()
        # Next to the extension: in the checkout for an editable or in-place build.
        inplace = self.inplace or getattr(self, "editable_mode", False)
        out = PACKAGE if inplace else os.path.join(self.build_lib, PACKAGE)
        for source, program, required in PROGRAMS:
            try:
                self._build(os.path.join(PACKAGE, source), program, out)
            except Exception as e:  # (a missing compiler raises one of several kinds)
                if required:
                    raise
                self.warn(f"{program} was not built ({e}): git runs the Python fsmonitor hook")

    def _build(self, source: str, program: str, out: str) -> None:
        objects = self.compiler.compile(
            [source], output_dir=self.build_temp, extra_postargs=["-O2", "-Wall"]
        )
        try:
            # Static: git runs the hook at every status and commit inside, and a dynamic one
            # spent some 0.2 ms of its 2 ms loading libc (exec to exit, loaded machine); a
            # guard stays for its view's life, and a static one maps no libc.
            self.compiler.link_executable(
                objects, program, output_dir=out, extra_postargs=["-static"]
            )
        except Exception:  # (no static libc here)
            self.compiler.link_executable(objects, program, output_dir=out)


setup(cmdclass={"build_ext": BuildWithPrograms})
