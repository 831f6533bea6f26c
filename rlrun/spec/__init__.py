"""The experiment spec: one JSON document, validated by a pydantic schema.

`load_spec` is the one entry point: it takes a file path or a built-in name, applies `--set`
overrides, and either returns a `Spec` or raises `SpecError` with one line per problem, each naming
the JSON path, the value and a fix. Algorithm hyper-parameters are validated by the algorithm's own
config class (looked up by `agent.algorithm` in `rlrun.spec.agents`), so each algorithm
documents its settings in one place. Validating a spec never imports torch: the configs are kept
apart from the networks.
"""

from __future__ import annotations

import copy
import difflib
import json
from importlib import resources
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from rlrun.arithmetic import ARITHMETIC, as_recorded_document
from rlrun.errors import SpecError
from rlrun.spec.agents import algorithm_names, config_class
from rlrun.spec.problems import KeyProblem
from rlrun.spec.sections import (
    ALE_NAMESPACE,
    AgentConfig,
    AtariSpec,
    DataSpec,
    EnvSpec,
    Frames,
    MemorySpec,
    MetaSpec,
    NetworkSpec,
    NormalizeSpec,
    OptimizerSpec,
    PrioritizedSpec,
    RecurrentSpec,
    Spec,
    Strict,
    WrapperSpec,
)

__all__ = [
    "ALE_NAMESPACE",
    "ARITHMETIC",
    "AgentConfig",
    "AtariSpec",
    "DataSpec",
    "EnvSpec",
    "Frames",
    "MemorySpec",
    "MetaSpec",
    "NetworkSpec",
    "NormalizeSpec",
    "OptimizerSpec",
    "PrioritizedSpec",
    "RecurrentSpec",
    "Spec",
    "Strict",
    "WrapperSpec",
    "apply_overrides",
    "builtin_document",
    "builtin_names",
    "builtin_search_names",
    "did_you_mean",
    "json_schema",
    "load_spec",
    "read_document",
    "recorded_spec",
    "user_code",
    "validate_spec",
]


# ---------------------------------------------------------------------------------------------
# Loading


def builtin_names() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in _builtin_dir().iterdir() if p.name.endswith(".json"))


def builtin_search_names() -> list[str]:
    """Built-in search specs (a spec with a `search` block, for `rlrun search`), kept apart from
    the specs `rlrun train` takes: `builtins/searches/`."""
    return sorted(
        p.name.removesuffix(".json") for p in (_builtin_dir() / "searches").iterdir() if p.name.endswith(".json")
    )


def builtin_document(name: str) -> dict[str, Any]:
    path = _builtin_dir() / f"{name}.json"
    if not path.is_file():
        path = _builtin_dir() / "searches" / f"{name}.json"
    if not path.is_file():
        raise SpecError([_unknown_builtin_message(name)])
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _builtin_dir() -> Any:
    return resources.files("rlrun.spec") / "builtins"


def _unknown_builtin_message(name: str) -> str:
    hint = _did_you_mean(name, builtin_names()) or f" built-ins: {', '.join(builtin_names())}"
    return f"spec {json.dumps(name)}: no such file or built-in spec;{hint}"


def read_document(source: str | Path) -> dict[str, Any]:
    """A spec document from a JSON file, or the built-in spec of that name."""
    path = Path(source)
    if path.is_dir():
        fix = "give a .json file or a built-in name (`rlrun spec list`)"
        raise SpecError([f"{path} is a folder, not a spec file; {fix}"])
    if path.is_file():
        try:
            document = json.loads(path.read_text(encoding="utf-8-sig"))  # the byte-order mark some editors write
        except UnicodeDecodeError as error:
            raise SpecError([f"{path}: not UTF-8 text ({_where_byte(error)}); save it as UTF-8"]) from None
        except OSError as error:
            raise SpecError([f"{path}: cannot be read ({error.strerror}); check the file's permissions"]) from None
        except json.JSONDecodeError as error:
            raise SpecError(
                [f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); fix the syntax"]
            ) from None
        if not isinstance(document, dict):
            raise SpecError([f"{path}: a spec is a JSON object {{...}}, got {type(document).__name__}"])
        if (what := _not_a_spec(path, document)) is not None:
            raise SpecError([what])
        return document
    if path.suffix == ".json" or "/" in str(source):
        fix = "give a path or a built-in name (`rlrun spec list`)"
        raise SpecError([f"spec file {json.dumps(str(source))} does not exist; {fix}"])
    return builtin_document(str(source))


def _not_a_spec(path: Path, document: dict[str, Any]) -> str | None:
    """What a JSON file is when it is one of rlrun's own files rather than a spec (a run's
    run.json, a snapshot's meta.json or MANIFEST.json), and the command meant: one line, or None."""
    run = document.get("run")
    if isinstance(run, dict) and "spec_revisions" in document:
        run_id = run.get("id", "?")
        return f"{path} is run {run_id}'s manifest (run.json), not a spec; to continue that run: rlrun resume {run_id}"
    if {"clock", "run_id", "session_index"} <= set(document):  # a snapshot's meta.json
        return _snapshot_advice(path, document)
    if {"format", "files"} <= set(document) <= {"format", "files", "logs"}:  # a snapshot's MANIFEST.json
        try:
            return _snapshot_advice(path, json.loads((path.parent / "meta.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return f"{path} is a snapshot's MANIFEST.json (its files' hashes), not a spec"
    return None


def _snapshot_advice(path: Path, meta: dict[str, Any]) -> str:
    run_id, index, frame = meta["run_id"], meta["session_index"], int(meta["clock"]["frame"])
    return (
        f"{path} is part of a snapshot of run {run_id} (session s{index}) at frame {frame:,}, not a spec;"
        f" to replay it: rlrun enjoy {run_id}/s{index}@{frame}; to continue the run: rlrun resume {run_id}"
    )


def _where_byte(error: UnicodeDecodeError) -> str:
    """The first byte that is not UTF-8, and its line and column as an editor counts them."""
    before = error.object[: error.start]
    line, column = before.count(b"\n") + 1, error.start - before.rfind(b"\n")
    return f"byte 0x{error.object[error.start]:02x} on line {line}, column {column}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`agent.optimizer.lr=0.01` -> (["agent", "optimizer", "lr"], 0.01); values are JSON or strings."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(path):
        raise SpecError([f"--set {text!r}: expected dotted.key=value, e.g. --set meta.max_frame=200k"])
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return path, value


def apply_overrides(document: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of the document with each `--set dotted.key=value` applied in order."""
    result = copy.deepcopy(document)
    for text in overrides:
        path, value = parse_override(text)
        node = result
        for depth, key in enumerate(path[:-1]):
            # A key under a section the document leaves null (`meta.slurm.time` when a recorded spec
            # has `"slurm": null`) starts that section, as under one it leaves out.
            child = node[key] = node.get(key) if node.get(key) is not None else {}
            if not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise SpecError([f"--set {text!r}: {where} is {child!r}, not an object with keys"])
            node = child
        node[path[-1]] = value
    return result


def load_spec(source: str | Path | dict[str, Any], overrides: list[str] | None = None) -> Spec:
    """Read, override and validate a spec; raises SpecError listing every problem.

    Args:
        source: A spec file (JSON), the name of a built-in spec (`rlrun spec list`), or the spec as a
            dict.
        overrides: Edits as `key=value`, applied before validation (`["meta.max_frame=20k"]`, as
            `--set`).

    Returns:
        The validated spec, as `train` takes it.

    Raises:
        SpecError: Every problem at once, each naming its key and the fix.
    """
    document = source if isinstance(source, dict) else read_document(source)
    edited = apply_overrides(document, overrides or [])
    try:
        return validate_spec(edited)
    except SpecError as error:
        switched = _algorithm_switch(document, edited, error.problems)
        if switched is None:
            raise
        raise SpecError(switched) from None


def _algorithm_switch(document: dict[str, Any], edited: dict[str, Any], problems: list[str]) -> list[str] | None:
    """An override that changed `agent.algorithm` leaves the old algorithm's settings behind, each
    an unknown key to the new one: said first, as one line naming the switch and the spec to start
    from, rather than as a list of keys that looks like the spec's fault. None: no switch."""
    before, after = (
        d.get("agent", {}).get("algorithm") if isinstance(d.get("agent"), dict) else None for d in (document, edited)
    )
    if before == after or before not in algorithm_names() or after not in algorithm_names():
        return None
    prefix = "agent."
    left = [
        p
        for p in problems
        if p.startswith(prefix) and ": unknown key;" in p and "." not in p[len(prefix) : p.index(":")]
    ]
    if not left:
        return None
    keys = [p[len(prefix) : p.index(":")] for p in left]
    env_id = edited.get("env", {}).get("id") if isinstance(edited.get("env"), dict) else None
    start = spec_to_start_from(after, env_id)
    line = (
        f"agent.algorithm = {json.dumps(after)}: switches {document.get('name', 'the spec')} from {before} to"
        f" {after}, which has none of {before}'s settings {', '.join(keys)}; start from a {after} spec"
        f" ({start}) and edit that"
    )
    return [line, *(p for p in problems if p not in left)]


def spec_to_start_from(algorithm: str, env_id: str | None) -> str:
    """The command that prints a built-in spec of `algorithm` on `env_id` (`rlrun spec list` when
    there is none): where a switch of algorithm starts."""
    same_env = [
        n
        for n in builtin_names()
        if (b := builtin_document(n))["agent"]["algorithm"] == algorithm and b["env"]["id"] == env_id
    ]
    same_env.sort(key=lambda n: not n.startswith(f"{algorithm}_"))  # dqn_cartpole before ddqn_cartpole
    return f"`rlrun spec show {same_env[0]}`" if same_env else "`rlrun spec list`"


def algorithm_switch_at_resume(previous: Spec, document: dict[str, Any], run_id: str) -> str | None:
    """Why a resume (or fork) of `run_id` cannot take `document`, an edit that switches its
    algorithm, before its settings are checked one by one against the other algorithm (each then
    "an unknown key", which reads as the spec's fault). None: the algorithm stays."""
    agent = document.get("agent")
    after = agent.get("algorithm") if isinstance(agent, dict) else None
    before = previous.agent.algorithm
    if after is None or after == before:
        return None
    shown = json.dumps(after)
    if after not in algorithm_names():
        return None  # an unknown name: validate_spec says so, with the names it takes
    env_id = previous.env.id
    return (
        f"agent.algorithm = {shown}: run {run_id} trains {before}, and its algorithm cannot change at resume,"
        f" nor in a --fork (its snapshots hold {before}'s networks and optimiser); train a new run from a"
        f" {after} spec instead ({spec_to_start_from(after, env_id)})"
    )


def validate_spec(document: dict[str, Any], *, check_env_id: bool = True) -> Spec:
    """The spec in `document`, or SpecError listing every problem. `check_env_id=False` skips
    asking Gymnasium whether `env.id` exists (and importing it), for readers of a spec that was
    checked when it was stored, such as `rlrun gc`."""
    problems: list[str] = []
    if "search" in document:  # a search space: `rlrun search` trains its trials, one run each
        problems.append(
            "search: this spec is a search space; run it with `rlrun search SPEC` (or remove the"
            " search block to train one run with the values it gives)"
        )
        document = {key: value for key, value in document.items() if key != "search"}
    agent: AgentConfig = AgentConfig(algorithm="?")
    raw_agent = document.get("agent")
    if isinstance(raw_agent, dict):
        name = raw_agent.get("algorithm")
        if name in algorithm_names():
            config = config_class(name)
            try:
                agent = config.model_validate(raw_agent)
            except ValidationError as error:
                problems += _describe(error, config, prefix=("agent",))
        elif "algorithm" not in raw_agent:
            problems.append(f"agent.algorithm: missing; add one of {', '.join(algorithm_names())}")
        else:
            hint = _did_you_mean(str(name), algorithm_names()) or f" choose one of {', '.join(algorithm_names())}"
            problems.append(f"agent.algorithm = {json.dumps(name)}: unknown algorithm;{hint}")
    try:
        spec = Spec.model_validate({**document, "agent": agent} if isinstance(raw_agent, dict) else document)
    except ValidationError as error:
        problems += _describe(error, Spec, prefix=())
    else:
        if check_env_id:
            problems += _check_env_id(spec.env.id, spec.env.packages)
        if not problems:
            return spec
    raise SpecError(problems)


def recorded_spec(document: dict[str, Any], *, check_env_id: bool = False) -> Spec:
    """A spec as a run or search recorded it (the registry's, a manifest's, a session task's): one
    recorded before `meta.arithmetic` existed trained with revision 1, whatever the default is now."""
    return validate_spec(as_recorded_document(document), check_env_id=check_env_id)


def _check_env_id(env_id: str, packages: list[str] | None = None) -> list[str]:
    from rlrun.spec.env_ids import env_id_problems

    return env_id_problems(env_id, packages or [])


# ---------------------------------------------------------------------------------------------
# Error messages: one line per problem, with the path, the value and a fix.


def user_code(spec: Spec) -> list[str]:
    """Every module of the user's own code a spec names, each once: the env's (`env.packages`, the
    id's `module:`), each wrapper's and the network's. A session imports them wherever it runs, so
    a cluster must ship them to its workers (or have them installed there)."""
    from rlrun.spec.env_ids import user_modules

    named = user_modules(spec.env.id, spec.env.packages)
    named += [wrapper.class_.partition(":")[0] for wrapper in spec.env.wrappers]
    network = getattr(spec.agent, "network", None)
    if network is not None and network.user:
        named.append(network.kind.partition(":")[0])
    return list(dict.fromkeys(named))


def did_you_mean(word: str, candidates: list[str]) -> str:
    """` did you mean "X"?` for the closest candidate, or nothing."""
    return _did_you_mean(word, candidates)


def _did_you_mean(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[word.lower()]] if word.lower() in lowered else []
    return f' did you mean "{close[0]}"?' if close else ""


_SCHEDULE_KINDS = {"constant", "linear", "piecewise", "exponential"}
_SHOWN_BLOCK = 80
"""The longest block an error line shows whole (a schedule, `{}`); a longer one (the whole agent)
would bury the reason, so its path alone says which."""


def _describe(error: ValidationError, model: type[BaseModel], prefix: tuple[str, ...]) -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(str(part) for part in item["loc"])
        loc = tuple(part for part in loc if part not in _SCHEDULE_KINDS and not part.startswith("function-"))
        path = ".".join(prefix + loc) or "spec"
        lines.append(_line(path, item, model, loc))
    return lines


def _line(path: str, item: Any, model: type[BaseModel], loc: tuple[str, ...]) -> str:
    kind, value, message = item["type"], item.get("input"), item["msg"]
    if kind == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        hint = _did_you_mean(loc[-1], allowed) or (f" allowed keys: {', '.join(allowed)}" if allowed else "")
        return f"{path}: unknown key;{hint or ' remove it'}"
    if kind == "missing":
        return f"{path}: required key is missing; add it"
    shown = json.dumps(value) if _jsonable(value) else repr(value)
    if kind == "literal_error":
        choices = [str(c) for c in (item.get("ctx") or {}).get("expected", "").replace("'", "").split(" or ")]
        choices = [c for part in choices for c in part.split(", ")]
        hint = _did_you_mean(str(value), choices) or f" use one of {', '.join(choices)}"
        return f"{path} = {shown}: not an accepted value;{hint}"
    if kind == "union_tag_invalid":
        kinds = "constant, linear, piecewise or exponential"
        return f"{path} = {shown}: unknown kind; use a number or a schedule with kind {kinds}"
    problem = (item.get("ctx") or {}).get("error")
    if isinstance(problem, KeyProblem):  # a block's check about one of its keys: that key, not the block
        block = "" if path == "spec" else path
        named = problem.value(value)
        said = json.dumps(named) if _jsonable(named) else repr(named)
        return f"{problem.path(block)} = {said}: {problem.said(block)}"
    message = message.removeprefix("Value error, ")
    if isinstance(value, dict) and len(shown) > _SHOWN_BLOCK:  # a whole block: its path says which
        return f"{path}: {message[0].lower()}{message[1:]}"
    return f"{path} = {shown}: {message[0].lower()}{message[1:]}"


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _fields_at(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """Names of the keys allowed at `loc` below `model`, following nested models."""
    current: Any = model
    for key in loc:
        field = current.model_fields.get(key) if _is_model(current) else None
        if field is None:
            return []
        current = _model_in(field.annotation)
        if current is None:
            return []
    return list(current.model_fields) if _is_model(current) else []


def _is_model(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


def _model_in(annotation: Any) -> Any:
    if _is_model(annotation):
        return annotation
    for arg in get_args(annotation) if get_origin(annotation) is not None else ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def json_schema() -> dict[str, Any]:
    """JSON Schema of a spec, with `agent` as the union of every algorithm's config."""
    schema = Spec.model_json_schema()
    agents = [config_class(name).model_json_schema() for name in algorithm_names()]
    defs = schema.setdefault("$defs", {})
    for agent_schema in agents:
        defs.update(agent_schema.pop("$defs", {}))
        defs[agent_schema["title"]] = agent_schema
    schema["properties"]["agent"] = {"oneOf": [{"$ref": f"#/$defs/{a['title']}"} for a in agents]}
    defs.pop("AgentConfig", None)
    return schema
