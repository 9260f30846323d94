"""Drives `gust mcp` with an independent MCP client: the Python `mcp` SDK's stdio client.

Run by crates/gust/tests/mcp.rs:

    python3 mcp_client.py --gust BIN --target URL [--db FILE | --daemon URL [--token T]]

It lists the tools, starts runs against the given `gust target`, follows them with
run_status, reads and compares their reports, lists them, and checks that refusals
come back as tool results with isError. Exits non-zero on the first failed check.
"""

import argparse
import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {
    "start_run",
    "run_status",
    "stop_run",
    "list_runs",
    "get_report",
    "compare_runs",
    "capacity",
}

checks = 0


def attr(obj, name):
    """A result field by its wire name (camelCase, the SDK's 1.x attribute) or by
    the snake_case attribute later SDK releases use for it."""
    if hasattr(obj, name):
        return getattr(obj, name)
    snake = "".join("_" + c.lower() if c.isupper() else c for c in name)
    return getattr(obj, snake)


def check(condition, what):
    global checks
    if not condition:
        raise AssertionError(what)
    checks += 1


def payload(result):
    """The structured answer of a successful tool call."""
    structured = attr(result, "structuredContent")
    if structured is not None:
        return structured
    return json.loads(result.content[0].text)


def error_text(result):
    return " ".join(c.text for c in result.content if getattr(c, "text", None))


async def ok(session, tool, args):
    result = await session.call_tool(tool, args)
    check(not attr(result, "isError"), f"{tool}({args}) failed: {error_text(result)}")
    return payload(result)


async def refused(session, tool, args, *fragments):
    result = await session.call_tool(tool, args)
    check(attr(result, "isError"), f"{tool}({args}) should be refused, got {result}")
    text = error_text(result)
    for fragment in fragments:
        check(fragment in text, f"{tool} refusal {text!r} should mention {fragment!r}")
    return text


async def wait_done(session, run_id, deadline_s=120):
    deadline = time.monotonic() + deadline_s
    while True:
        status = await ok(session, "run_status", {"run_id": run_id})
        check(status["run_id"] == run_id, f"run_status answered for {status['run_id']}")
        if status["status"] != "running":
            return status
        progress = status.get("progress")
        check(progress is None or 0.0 <= progress <= 1.0, f"progress {progress} out of 0..1")
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still running after {deadline_s}s")
        await asyncio.sleep(0.3)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gust", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--db")
    parser.add_argument("--daemon")
    parser.add_argument("--token")
    opts = parser.parse_args()

    args = ["mcp"]
    if opts.daemon:
        args += ["--daemon", opts.daemon]
        if opts.token:
            args += ["--token", opts.token]
    elif opts.db:
        args += ["--db", opts.db]
    server = StdioServerParameters(command=opts.gust, args=args)

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            server_name = attr(init, "serverInfo").name
            check(server_name == "gust", f"server name {server_name}")

            listed = await session.list_tools()
            names = {t.name for t in listed.tools}
            check(names == TOOLS, f"tools {sorted(names)}")
            for tool in listed.tools:
                check(tool.description, f"{tool.name} has no description")
                check(attr(tool, "inputSchema").get("type") == "object", f"{tool.name} schema")

            # Refusals are tool results with isError, naming what is wrong.
            await refused(session, "run_status", {"run_id": 999999}, "999999")
            await refused(session, "start_run", {}, "`spec`", "`toml`", "`path`")
            await refused(
                session,
                "start_run",
                {"spec": {"url": opts.target, "mode": "closed", "concurrency": 1,
                          "duration": "1s", "bogus_field": 1}},
                "bogus_field",
            )
            await refused(session, "get_report", {"run_id": "seven"}, "`run_id`")

            # A 2 s closed-model run, given as a JSON spec.
            spec = {"name": "mcp-ci", "url": opts.target, "mode": "closed",
                    "concurrency": 2, "duration": "2s", "workers": 1,
                    "thresholds": ["errors<1%"]}
            started = await ok(session, "start_run", {"spec": spec})
            run_id = started["run_id"]
            check(isinstance(run_id, int), f"run id {run_id!r}")
            status = await wait_done(session, run_id)
            check(status["status"] == "completed", f"run ended {status}")
            check(status["progress"] == 1.0, f"progress of a completed run {status['progress']}")
            # Stopping a finished run is refused.
            await refused(session, "stop_run", {"run_id": run_id}, "not_running")

            answer = await ok(session, "get_report", {"run_id": run_id})
            report = answer["report"]
            check(report["responses"] > 0, f"responses {report['responses']}")
            check(report["failures"] == 0, f"failures {report['failures']}")
            check(answer["verdict"] == "pass", f"verdict {answer['verdict']}")
            summary = await ok(session, "get_report", {"run_id": run_id, "summary": True})
            check(summary["summary"]["responses"] == report["responses"], "summary counts")
            check(summary["summary"]["p99_ms"] > 0, "summary p99")

            same = await ok(session, "compare_runs", {"run_id": run_id, "baseline_id": run_id})
            for metric in ("rps", "p50_ms", "p99_ms", "p99_9_ms"):
                check(same["metrics"][metric]["ratio"] == 1.0, f"self ratio of {metric}")
                check(same["metrics"][metric]["delta"] == 0.0, f"self delta of {metric}")
            # No run is marked as baseline in this fresh history.
            await refused(session, "compare_runs", {"run_id": run_id}, "baseline_id")

            # A second run, as TOML text, bounded by a request count.
            toml_spec = (
                f'url = "{opts.target}"\nmode = "closed"\nconcurrency = 2\n'
                'iterations = 300\nworkers = 1\n'
            )
            second = (await ok(session, "start_run", {"toml": toml_spec}))["run_id"]
            status = await wait_done(session, second)
            check(status["status"] == "completed", f"second run ended {status}")
            second_report = (await ok(session, "get_report", {"run_id": second}))["report"]
            check(second_report["responses"] == 300, f"responses {second_report['responses']}")
            diff = await ok(session, "compare_runs", {"run_id": second, "baseline_id": run_id})
            check(diff["run_id"] == second and diff["baseline_id"] == run_id, "compare ids")
            check(diff["metrics"]["rps"]["baseline"] == report["rps"], "baseline rps")

            # A capacity search against the target, small enough to end at `max`.
            cap = await ok(session, "capacity", {"url": opts.target, "slo": "errors<1%",
                                                "start": 50, "max": 200,
                                                "step_duration": "1s"})
            cap_id = cap["run_id"]
            check(cap["kind"] == "capacity", f"capacity answer {cap}")
            status = await wait_done(session, cap_id)
            check(status["status"] == "completed", f"capacity search ended {status}")
            check(status["kind"] == "capacity", f"capacity status kind {status['kind']}")
            cap_report = (await ok(session, "get_report", {"run_id": cap_id}))["report"]
            check(cap_report["best_rate"] == 200, f"best rate {cap_report['best_rate']}")
            check(len(cap_report["steps"]) == 3, f"steps {len(cap_report['steps'])}")
            await refused(session, "capacity", {"url": opts.target, "slo": "p99<<1"}, "slo")

            listed_runs = (await ok(session, "list_runs", {"limit": 10}))["runs"]
            ids = [r["run_id"] for r in listed_runs]
            check(run_id in ids and second in ids, f"list_runs ids {ids}")
            first = next(r for r in listed_runs if r["run_id"] == run_id)
            check(first["name"] == "mcp-ci" and first["url"] == opts.target, f"listed {first}")
            check(ids.index(second) < ids.index(run_id), "newest first")
            only_one = (await ok(session, "list_runs", {"limit": 1}))["runs"]
            check(len(only_one) == 1, f"limit 1 gave {len(only_one)}")

    mode = "daemon" if opts.daemon else "standalone"
    print(f"mcp client ({mode}): {checks} passed, 0 failed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print(f"mcp client: check {checks + 1} failed: {e}", file=sys.stderr)
        sys.exit(1)
