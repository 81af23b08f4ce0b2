"""Helm, as a library (the helm-sdkpy wheel), for the chart tests.

Usage:
  helm.py SDK_DIR lint CHART
  helm.py SDK_DIR install KUBECONFIG NAMESPACE RELEASE CHART VALUES_JSON
  helm.py SDK_DIR upgrade KUBECONFIG NAMESPACE RELEASE CHART VALUES_JSON
  helm.py SDK_DIR uninstall KUBECONFIG NAMESPACE RELEASE

SDK_DIR is the unpacked wheel. Prints the result as JSON on stdout; exits 1 with the error on
stderr when Helm fails.
"""

import asyncio
import json
import sys


async def main(argv):
    sdk_dir, action, *rest = argv
    sys.path.insert(0, sdk_dir)
    import helm_sdkpy as helm

    if action == "lint":
        (chart,) = rest
        cfg = helm.Configuration(namespace="default")
        result = await helm.Lint(cfg).run(chart)
        # Go errors do not serialize; keep their text where the shim gives one.
        return result
    kubeconfig, namespace, release, *more = rest
    cfg = helm.Configuration(namespace=namespace, kubeconfig=kubeconfig)
    if action == "install":
        chart, values = more
        return await helm.Install(cfg).run(
            release_name=release,
            chart_path=chart,
            values=json.loads(values),
            create_namespace=True,
            wait=False,
            timeout=120,
        )
    if action == "upgrade":
        chart, values = more
        return await helm.Upgrade(cfg).run(
            release_name=release, chart_path=chart, values=json.loads(values), wait=False, timeout=120
        )
    if action == "uninstall":
        return await helm.Uninstall(cfg).run(release_name=release, wait=False, timeout=120)
    raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    try:
        out = asyncio.run(main(sys.argv[1:]))
    except Exception as e:  # noqa: BLE001 - report any Helm failure as text
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(out, default=str))
