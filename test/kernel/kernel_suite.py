"""Jupyter's own kernel test suite (Debian's python3-jupyter-kernel-test) against the hearth kernel.

Usage: kernel_suite.py KERNEL_NAME   (JUPYTER_PATH must point at its kernelspec)

Every feature the suite can check is configured, so no test is skipped for a
missing sample; the suite validates each message against the protocol schema.
Prints one JSON object: every test and subtest with its outcome
("pass", "fail", "error", "skip") and the failure text; exits 1 unless all pass.
"""
import json
import sys
import unittest

import jupyter_kernel_test as jkt

KERNEL_NAME = sys.argv[1]


class HearthKernelTests(jkt.KernelTests):
    kernel_name = KERNEL_NAME
    language_name = "typescript"
    file_extension = ".ts"

    code_hello_world = 'console.log("hello, world");'
    code_stderr = 'console.error("something went wrong");'

    # The suite compares the set of matches exactly.
    completion_samples = [
        {"text": "Math.ma", "matches": {"max"}},
        {"text": "Math.flo", "matches": {"floor"}},
    ]

    complete_code_samples = ["1", "const total: number = 1 + 2;", "function double(x: number) { return 2 * x; }", "for (const c of 'ab') console.log(c);"]
    incomplete_code_samples = ["for (let i = 0; i < 3; i++) {", "const xs = [1,", "function f(", "/* a comment that goes on"]
    invalid_code_samples = ["const = 1;", "1 +* 2", "}", "let 9lives = 1;"]

    code_page_something = 'import { page } from "hearth/notebook";\npage("Array.prototype.map(callbackfn) calls callbackfn on each element");'

    code_generate_error = 'throw new Error("boom");'

    code_execute_result = [
        {"code": "6 * 7", "result": "42"},
        {"code": "[1, 2, 3].map((x) => x * 2)", "result": "[ 2, 4, 6 ]"},
        {"code": "'hearth'.toUpperCase()", "result": "'HEARTH'"},
    ]

    code_display_data = [
        {"code": 'import { display } from "hearth/notebook";\ndisplay("plain text");', "mime": "text/plain"},
        {"code": 'import { display, table } from "hearth/notebook";\ndisplay(table([{ step: 1, reward: 0.5 }]));', "mime": "text/html"},
    ]

    # A SQLite GLOB, as IPython's history search uses: matches only "6 * 7".
    code_history_pattern = "6 ? 7"
    supported_history_operations = ("tail", "range", "search")

    code_inspect_sample = "Math.max"

    code_clear_output = 'import { clearOutput } from "hearth/notebook";\nconsole.log("before");\nclearOutput({ wait: true });'


class Recorder(unittest.TextTestResult):
    """Keeps every outcome, subtests included, as data."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []

    def _add(self, test, outcome, detail=""):
        self.outcomes.append({"test": test.id().rsplit(".", 1)[-1] if not isinstance(test, unittest.case._SubTest) else test.id().split(".", 2)[-1], "outcome": outcome, "detail": detail})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skip", str(reason))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is None:
            self._add(subtest, "pass")
        elif issubclass(err[0], unittest.SkipTest):
            self._add(subtest, "skip", str(err[1]))
        else:
            self._add(subtest, "fail" if issubclass(err[0], test.failureException) else "error", self._exc_info_to_string(err, test))


suite = unittest.defaultTestLoader.loadTestsFromTestCase(HearthKernelTests)
runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Recorder)
result = runner.run(suite)
print(json.dumps({"ran": result.testsRun, "outcomes": result.outcomes}))
ok = result.wasSuccessful() and not result.skipped and all(o["outcome"] == "pass" for o in result.outcomes)
sys.exit(0 if ok else 1)
