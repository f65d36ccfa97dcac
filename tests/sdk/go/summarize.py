"""Reads `go test -json` on stdin, echoes the test output as `go test -v` would,
and ends with `N passed, N failed` counting leaf tests (a scenario, or each
subtest of one). A test that started but never ended (the run timed out) counts
as failed, and so does a package that failed with no failing test (a build
error, a panic). Exits 1 if anything failed or nothing ran."""
import json
import sys

results = {}  # test name -> "pass" | "fail" | "skip" | "run" (never ended)
package_failed = False
for line in sys.stdin:
    try:
        ev = json.loads(line)
    except ValueError:
        sys.stdout.write(line)  # compiler output and the like
        continue
    action, test = ev.get("Action"), ev.get("Test")
    if action == "output":
        sys.stdout.write(ev.get("Output", ""))
    elif action == "run" and test:
        results.setdefault(test, "run")
    elif action in ("pass", "fail", "skip") and test:
        results[test] = action
    elif action in ("fail", "build-fail") and not test:
        package_failed = True
    sys.stdout.flush()

names = set(results)
leaves = [n for n in names if not any(o.startswith(n + "/") for o in names)]
passed = sum(results[n] == "pass" for n in leaves)
skipped = sum(results[n] == "skip" for n in leaves)
failing = sorted(n for n in leaves if results[n] in ("fail", "run"))
failed = len(failing)
if package_failed and failed == 0:
    failing, failed = ["(package: build error, panic or timeout)"], 1
if failing:
    print("failed: " + ", ".join(failing))
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed or skipped or passed == 0 else 0)
