"""scripts/check-layers.py: the repository keeps the layer order, and an include that breaks it
fails, naming its file and line. Run with: python3 tests/test_check_layers.py"""

import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "check-layers.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                          capture_output=True, text=True, check=False)


class CheckLayers(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="check-layers-"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def tree(self, order, files):
        (self.tmp / "docs").mkdir()
        (self.tmp / "docs" / "architecture.md").write_text(f"# layers\n\n```\n{order}\n```\n")
        for name, text in files.items():
            path = self.tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return self.tmp

    def copy_of_the_repository(self):
        for part in ("src", "kernels", "docs"):
            shutil.copytree(REPO / part, self.tmp / part)
        return self.tmp

    def test_the_repository_keeps_its_order(self):
        result = run(REPO)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_an_injected_upward_include_fails_naming_file_and_line(self):
        root = self.copy_of_the_repository()
        units = root / "src" / "core" / "units.h"
        lines = units.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("#include")) + 1
        lines.insert(at, '#include "measure/measure.h"')
        units.write_text("\n".join(lines) + "\n")
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"src/core/units.h:{at + 1}: core includes measure, a layer above it",
                      result.stderr)

    def test_downward_includes_pass(self):
        root = self.tree("core → sweep, program → cli", {
            "src/core/a.h": "#pragma once\n",
            "src/program/b.h": '#include "core/a.h"\n',
            "src/cli/c.cpp": '#include "program/b.h"\n#include "core/a.h"\n#include <vector>\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_folder_beside_in_its_layer_fails(self):
        root = self.tree("core → sweep, program → cli", {
            "src/core/a.h": "",
            "src/sweep/s.cpp": '\n#include "program/b.h"\n',
            "src/program/b.h": "",
            "src/cli/c.cpp": "",
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/sweep/s.cpp:2: sweep includes program, beside it in the same layer",
                      result.stderr)

    def test_folders_that_include_each_other_fail(self):
        root = self.tree("core → device → cli", {
            "src/core/a.h": '#include "device/b.h"\n',
            "src/device/b.h": '#include "core/a.h"\n',
            "src/cli/c.cpp": "",
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("core and device include each other: src/core/a.h:1 and src/device/b.h:1",
                      result.stderr)

    def test_kernel_folders_are_included_by_their_short_name(self):
        root = self.tree("core → kernels/common → kernels/cpu, kernels/cuda → device", {
            "src/core/a.h": "",
            "kernels/common/m.h": '#include "core/a.h"\n',
            "kernels/cpu/k.cpp": '#include "common/m.h"\n#include "cuda/k.h"\n',
            "kernels/cuda/k.h": '#include "common/m.h"\n',
            "src/device/d.cpp": '#include "cpu/k.h"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("kernels/cpu/k.cpp:2: kernels/cpu includes kernels/cuda, beside it",
                      result.stderr)
        self.assertEqual(result.stderr.count("\n"), 2, result.stderr)  # that one and the count

    def test_a_folder_without_a_place_fails(self):
        root = self.tree("core → cli", {"src/core/a.h": "", "src/extra/x.h": ""})
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("folder 'extra' has no place in the layer order", result.stderr)

    def test_a_missing_order_line_is_an_error_of_its_own(self):
        root = self.tree("no order here", {"src/core/a.h": ""})
        self.assertEqual(run(root).returncode, 2)


if __name__ == "__main__":
    unittest.main()
