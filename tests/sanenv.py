"""Environment for the tests' child processes under the ASan build."""
import os


def compiler_env(env=None):
    """The environment for hetc itself (compile, plan, train: no MPI).  Under
    ASan, LeakSanitizer unwinds every malloc's stack; the MPI processes need
    the slow DWARF unwinder (fast_unwind_on_malloc=0) so that Open MPI's
    leaks, in libraries without frame pointers, reach the suppressions that
    name those libraries.  hetc has none of those, and its own code keeps
    frame pointers, so it takes the fast one (5x less CPU in these tests)."""
    env = dict(os.environ if env is None else env)
    if "fast_unwind_on_malloc=0" in env.get("LSAN_OPTIONS", ""):
        env["LSAN_OPTIONS"] = env["LSAN_OPTIONS"].replace("fast_unwind_on_malloc=0",
                                                          "fast_unwind_on_malloc=1")
    return env
