"""samconfig.toml: `sam build` and `sam deploy` must read the same Architecture, or an
arm64 build could be deployed onto x86_64 functions (or the reverse) and fail at the
first invocation. SAM takes a command's `parameter_overrides` from its own section when
it has one (replacing the global one as a whole), else from `[<env>.global.parameters]`;
a parameter given nowhere takes the template's default.

  python3 check-samconfig.py <samconfig.toml> [template]   (default infra/template.yaml)
"""

import re
import sys
import tomllib


def overrides(text):
    """Parameter overrides `Key=Value Key2="Value 2"` as a dict."""
    if isinstance(text, list):
        text = " ".join(text)
    pairs = re.findall(r'(\w+)=("[^"]*"|\'[^\']*\'|\S+)', text or "")
    return {k: v.strip("\"'") for k, v in pairs}


def template_default(template, name):
    src = open(template, encoding="utf-8").read()
    m = re.search(rf"^  {name}:\n(?:    .*\n)*?    Default: (\S+)", src, re.M)
    return m.group(1).strip("\"'") if m else None


def main():
    path = sys.argv[1]
    template = sys.argv[2] if len(sys.argv) > 2 else "infra/template.yaml"
    with open(path, "rb") as f:
        config = tomllib.load(f)
    default = template_default(template, "Architecture")
    problems = []
    for env, sections in config.items():
        if not isinstance(sections, dict):
            continue
        glob = sections.get("global", {}).get("parameters", {})

        def effective(command):
            own = sections.get(command, {}).get("parameters", {})
            raw = own.get("parameter_overrides", glob.get("parameter_overrides"))
            return overrides(raw).get("Architecture", default)

        build, deploy = effective("build"), effective("deploy")
        if build != deploy:
            problems.append(f"[{env}]: sam build uses Architecture={build}, sam deploy {deploy}")
        else:
            print(f"    [{env}] build and deploy: Architecture={build}")
        if "Architecture" not in overrides(glob.get("parameter_overrides")):
            problems.append(f"[{env}.global.parameters] should set Architecture for both commands")
    if problems:
        for p in problems:
            print(f"Error: {p}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
