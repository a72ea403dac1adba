"""scripts/check-sizes.py: a file under src/ over 800 lines and a function over 150 fail, naming
the file (and the function's line and name); braces in comments, strings and preprocessor lines do
not count, lambdas count as part of their function, classes and namespaces are not functions.
Run with: python3 tests/test_check_sizes.py"""

import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "check-sizes.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                          capture_output=True, text=True, check=False)


def function(name, body_lines, head="int"):
    body = "".join(f"  x += {i};  // {{ not a brace\n" for i in range(body_lines))
    return f"{head} {name}(int x) {{\n{body}  return x;\n}}\n"


class CheckSizes(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="check-sizes-"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def tree(self, files):
        for name, text in files.items():
            path = self.tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return run(self.tmp)

    def test_functions_and_files_within_their_limits_pass(self):
        # 150 lines from the name to the closing brace: 1 + 147 + return + brace.
        text = "namespace a {\nstruct S {\n" + function("member", 147) + "};\n"
        text += function("free", 147) + "}  // namespace a\n"
        result = self.tree({"src/x/a.cpp": text})
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_long_function_fails_naming_it(self):
        text = "namespace a {\nclass C {\n int y = 0;\n};\n" + function("C::grow", 148, "void")
        result = self.tree({"kernels/cuda/k.cu": text})
        self.assertEqual(result.returncode, 1)
        self.assertIn("kernels/cuda/k.cu:5: C::grow is 151 lines", result.stderr)

    def test_a_long_lambda_counts_in_its_function(self):
        lam = "".join(f"    y += {i};\n" for i in range(150))
        text = f"int outer(int y) {{\n  auto f = [&] {{\n{lam}  }};\n  f();\n  return y;\n}}\n"
        result = self.tree({"src/x/a.cpp": text})
        self.assertIn("src/x/a.cpp:1: outer is", result.stderr)

    def test_strings_and_directives_do_not_open_braces(self):
        text = '#define OPEN {\nconst char* s = "{{{";\nchar c = \'{\';\n' + function("f", 10)
        text += function("g", 160)
        result = self.tree({"src/x/a.cpp": text})
        self.assertIn("src/x/a.cpp:17: g is 163 lines", result.stderr)
        self.assertNotIn(" f is", result.stderr)

    def test_a_long_file_under_src_fails_and_under_kernels_does_not(self):
        long = "".join(f"int v{i} = {i};\n" for i in range(801))
        result = self.tree({"src/x/long.h": long, "kernels/cpu/long.h": long})
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/x/long.h: 801 lines", result.stderr)
        self.assertNotIn("kernels/cpu/long.h", result.stderr)


if __name__ == "__main__":
    unittest.main()
