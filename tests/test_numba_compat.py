"""Every patch of numba-cuda is declared in gpucache_ext.numba_compat, applied
once, and checked against numba's signatures: an upgrade that changes a
patched function fails here, before it can change what the cache builds."""

import inspect

import pytest

from gpucache_ext import numba_compat
import gpucache_ext.stages  # noqa: F401  (installs the patches)


@pytest.mark.parametrize("patch", numba_compat.PATCHES, ids=lambda p: p.target.split(":")[1])
def test_numbas_signature_is_the_one_the_patch_was_written_against(patch):
    assert numba_compat.numba_signature(patch.target) == patch.signature, (
        f"numba-cuda changed {patch.target}; read its new code, then update the replacement "
        f"in gpucache_ext.stages and the patch ({patch.why})")


def test_every_patch_is_installed_once_and_keeps_numbas_original():
    installed = numba_compat.installed()
    assert set(installed) == {patch.target for patch in numba_compat.PATCHES}
    for patch in numba_compat.PATCHES:
        owner, attribute = numba_compat._owner(patch.target)
        current = inspect.getattr_static(owner, attribute)
        assert numba_compat._unwrap(current, patch.kind) is not installed[patch.target]  # replaced
        assert numba_compat.original(patch.target) is installed[patch.target]
    before = {patch.target: inspect.getattr_static(*numba_compat._owner(patch.target))
              for patch in numba_compat.PATCHES}
    numba_compat.install({patch.target: (lambda original: original) for patch in numba_compat.PATCHES})
    after = {patch.target: inspect.getattr_static(*numba_compat._owner(patch.target))
             for patch in numba_compat.PATCHES}
    assert before == after  # a second install changes nothing


def test_a_missing_replacement_is_refused_before_anything_is_patched():
    with pytest.raises(ValueError, match="no replacement given for"):
        numba_compat.install({})


def test_no_other_module_patches_numba():
    """Outside numba_compat, nothing assigns to numba's modules or classes
    (the temporary swaps its docstring lists excepted)."""
    import ast
    from pathlib import Path

    allowed = {"ipython/cell.py", "launch/simulator.py", "toolchain/linking.py", "stages.py"}  # the documented swaps
    root = Path(numba_compat.__file__).parent
    for path in root.rglob("*.py"):
        name = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    text = ast.unparse(target)
                    if text.startswith(("CUDADispatcher.", "BaseContext.", "InlineWorker.", "FunctionIdentity.",
                                        "nbtypes.", "lowering.")):
                        pytest.fail(f"{name} patches numba ({text}): declare it in numba_compat")
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and name not in allowed \
                    and name != "numba_compat.py":
                owner = ast.unparse(node.args[0])
                assert not owner.startswith(("numba", "CUDADispatcher", "nbtypes")), f"{name}: setattr({owner}, ...)"
