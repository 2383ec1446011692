"""The install's one step beyond pyproject.toml: the compiled fsmonitor hook.

`gitsess/overlay/fsmonitor_hook.c` is a program, not an extension module: it is built with the
extension's compiler next to `fsmonitor_hook.py` as `fsmonitor-hook` (in the checkout for an
editable install). Without a compiler the install goes on, and git runs the Python hook.
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_ext import build_ext

HOOK_SOURCE = os.path.join("gitsess", "overlay", "fsmonitor_hook.c")
HOOK = "fsmonitor-hook"  # (fsmonitor_hook.COMPILED)


class BuildWithHook(build_ext):
    def run(self) -> None:
        super().run()
        # Next to the extension: in the checkout for an editable or in-place build.
        inplace = self.inplace or getattr(self, "editable_mode", False)
        package = os.path.join("gitsess", "overlay")
        out = package if inplace else os.path.join(self.build_lib, package)
        try:
            objects = self.compiler.compile(
                [HOOK_SOURCE], output_dir=self.build_temp, extra_postargs=["-O2", "-Wall"]
            )
            try:
                # Static: git runs the hook at every status and commit inside, and a dynamic
                # one spent some 0.2 ms of its 2 ms loading libc (exec to exit, loaded machine).
                self.compiler.link_executable(
                    objects, HOOK, output_dir=out, extra_postargs=["-static"]
                )
            except Exception:  # (no static libc here)
                self.compiler.link_executable(objects, HOOK, output_dir=out)
        except Exception as e:  # (a missing compiler raises one of several kinds)
            self.warn(f"the compiled fsmonitor hook was not built ({e}): git runs the Python one")


setup(cmdclass={"build_ext": BuildWithHook})
