"""An engine's own command-line grammar, read from its release wheel without installing the engine.

SGLang builds its parser in `ServerArgs.add_cli_args` (sglang/srt/server_args.py): most flags are
derived from annotated fields (`A[T, "help"]`, `A[T, Arg(...)]`) by `add_cli_args_from_dataclass`
(sglang/srt/arg_groups/arg_utils.py), the rest are `parser.add_argument` calls. Importing
server_args drags in torch, triton, xgrammar and a thousand modules, so it is not imported. Instead:

- arg_utils.py and argparse_actions.py, which import only the standard library (and msgspec), are
  executed from the wheel: the flag derivation and the custom argparse actions are SGLang's own;
- the fields are read from the source (ServerArgs' own, plus, from the releases that split them
  into namespace classes, those passed to `collect_input_fields`); their annotations are rebuilt
  as real typing objects carrying real `Arg` metadata, and SGLang's function derives the flags;
- the `parser.add_argument` calls in `add_cli_args` are read from the source.

Only what does not shape the grammar is left unevaluated: help texts, defaults, the value a custom
action stores, and `type_parser` functions (replaced by `str`, which accepts every value the real
one accepts and more). A `choices` list computed at run time (a parser registry) is left
unchecked and named in `EngineGrammar.unchecked`. Anything else the reader cannot evaluate raises
a RigError naming file:line instead of guessing. Abbreviated flags are refused (SGLang accepts
them): an abbreviation that is unique in one release can be ambiguous in the next.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oracles.engine_source import Evaluator, ModuleRef, Opaque, Unresolvable, WheelSource

from rig.errors import RigError

SERVER_ARGS = "sglang.srt.server_args"
# Arguments that decide which tokens a flag consumes: they must be read, never guessed.
_GRAMMAR_KEYS = {"aliases", "cli_name", "nargs", "required", "action", "no_cli", "dest", "type"}
# Arguments that change only the value stored, never whether argv parses.
_VALUE_KEYS = {"const", "const_value", "default", "new_flag", "error_message", "help", "metavar"}
_LAUNCHERS = ("sglang.launch_server",)


class _ArgvError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        raise _ArgvError(message)

    def print_help(self, file: typing.IO[str] | None = None) -> None:
        pass  # `--help` in a launch argv is an error here, not a request

    def exit(self, status: int = 0, message: str | None = None) -> typing.NoReturn:
        raise _ArgvError(message or "the argv asks for the help text (-h/--help), which exits the server")


@dataclass(frozen=True)
class EngineGrammar:
    """An engine release's command-line grammar as a real argparse parser."""

    engine: str
    release: str
    parser: argparse.ArgumentParser
    unchecked: tuple[str, ...] = ()

    @property
    def flags(self) -> set[str]:
        return set(self.parser._option_string_actions)

    def check(self, args: list[str], where: str) -> argparse.Namespace:
        """Parse `args` as the engine would; a flag it lacks, a bad value or a missing one is one RigError."""
        try:
            return self.parser.parse_args(args)
        except _ArgvError as error:
            message = str(error).strip()
            unknown = [arg.split("=")[0] for arg in args if arg.startswith("--") and arg.split("=")[0] not in self.flags]
            near = difflib.get_close_matches(unknown[0], self.flags, n=1) if unknown else []
            fix = f"did you mean {near[0]}?" if near else f"check the flag in `python -m sglang.launch_server --help` of {self.engine} {self.release}"
            raise RigError(where, "server_args", f"{self.engine} {self.release} rejects the launch argv: {message}", fix) from None


def launch_args(argv: list[str]) -> list[str]:
    """The arguments SGLang's parser sees: what follows `-m sglang.launch_server`."""
    for index, token in enumerate(argv):
        if token in _LAUNCHERS and index > 0 and argv[index - 1] == "-m":
            return argv[index + 1:]
    raise RigError(" ".join(argv[:4]), "argv", "no `-m sglang.launch_server` in the server command line",
                   "launch SGLang with `python3 -m sglang.launch_server` (rig/engines.py)")


@functools.lru_cache(maxsize=8)
def sglang_grammar(wheel: Path) -> EngineGrammar:
    """SGLang's launch grammar for the release in `wheel` (a .whl path)."""
    source = WheelSource(Path(wheel))
    try:
        reader = _ServerArgsReader(source)
        parser = reader.build()
    except Unresolvable as why:
        raise RigError(source.wheel.name, SERVER_ARGS, f"cannot read the argument parser ({why})",
                       "extend tests/oracles/engine_args.py for this release") from None
    missing = [flag for flag in ("--model-path", "--port", "--tp-size") if flag not in parser._option_string_actions]
    if missing:
        raise RigError(source.wheel.name, source.where(SERVER_ARGS), f"read no {', '.join(missing)} from ServerArgs",
                       "this release builds its parser in a way tests/oracles/engine_args.py does not read yet: extend it")
    return EngineGrammar("sglang", source.version, parser, tuple(sorted(reader.unchecked)))


class _ServerArgsReader:
    """Rebuilds `ServerArgs.add_cli_args` on a real parser from the wheel's source."""

    def __init__(self, source: WheelSource) -> None:
        self.source, self.evaluator = source, Evaluator(source)
        self.unchecked: set[str] = set()
        self._unchecked_fields: set[str] = set()
        self._local: dict[str, Any] = {}  # add_cli_args' local variables, as far as they are constant
        self.arg_utils = source.execute("sglang.srt.arg_groups.arg_utils")

    def build(self) -> argparse.ArgumentParser:
        parser = _Parser(prog=f"sglang.launch_server ({self.source.version})", allow_abbrev=False)
        method = next((n for n in self.source.classdef(SERVER_ARGS, "ServerArgs").body
                       if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"), None)
        if method is None:
            raise self._error(SERVER_ARGS, None, "ServerArgs has no add_cli_args")
        parser_name = method.args.args[0].arg
        local = self._local
        for stmt in method.body:
            uses_parser = any(isinstance(n, ast.Name) and n.id == parser_name for n in ast.walk(stmt))
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and uses_parser:
                self._call(parser, parser_name, stmt.value)
            elif isinstance(stmt, ast.Assign) and not uses_parser and all(isinstance(t, ast.Name) for t in stmt.targets):
                try:
                    value: Any = self.evaluator.value(stmt.value, SERVER_ARGS, local)
                except Unresolvable:
                    value = Opaque(ast.unparse(stmt.value))
                local.update({target.id: value for target in stmt.targets if isinstance(target, ast.Name)})
            elif uses_parser:
                raise self._error(SERVER_ARGS, stmt, "adds flags under a condition or through a helper rig does not model")
            # Anything else (docstrings, env-gated additions to a local choices set) leaves the grammar as released.
        for action in parser._actions:
            if action.dest in self._unchecked_fields and action.choices is None:
                self.unchecked.update(action.option_strings)
        return parser

    def _call(self, parser: argparse.ArgumentParser, parser_name: str, call: ast.Call) -> None:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == parser_name \
                and func.attr == "add_argument":
            self._add_argument(parser, call)
        elif isinstance(func, ast.Name) and self._resolves_to(func, self.arg_utils.add_cli_args_from_dataclass) \
                and not call.keywords and ast.unparse(call.args[1]) == "ServerArgs":
            self.arg_utils.add_cli_args_from_dataclass(parser, self._fields_dataclass())
        else:
            raise self._error(SERVER_ARGS, call, f"passes the parser to {ast.unparse(func)}, which rig does not model")

    def _resolves_to(self, node: ast.expr, target: Any) -> bool:
        try:
            return self.evaluator.value(node, SERVER_ARGS) is target
        except Unresolvable:
            return False

    def _add_argument(self, parser: argparse.ArgumentParser, call: ast.Call) -> None:
        flags = [self._strict(a, SERVER_ARGS, "flag name", local=self._local) for a in call.args]
        kwargs: dict[str, Any] = {}
        for keyword in call.keywords:
            key = keyword.arg or ""
            if key == "type":
                kwargs[key] = self._type_func(keyword.value)
            elif key == "choices":
                kwargs[key] = self._choices(keyword.value, SERVER_ARGS, local=self._local)
                if kwargs[key] is None:
                    self.unchecked.update(flags)
            elif key in _GRAMMAR_KEYS:
                kwargs[key] = self._strict(keyword.value, SERVER_ARGS, key, local=self._local)
            elif key in ("help", "default", "metavar"):
                continue
            else:
                kwargs[key] = self._lenient(keyword.value, SERVER_ARGS, local=self._local)
        parser.add_argument(*flags, **kwargs)

    def _type_func(self, node: ast.expr) -> Any:
        try:
            value = self.evaluator.value(node, SERVER_ARGS)
        except Unresolvable:
            return str
        return value if value in (int, float, str) else str

    # ---- fields ------------------------------------------------------------------------------

    def _fields_dataclass(self) -> type:
        """ServerArgs' fields as a dataclass whose annotations are real typing objects with real Arg metadata."""
        fields: dict[str, tuple[str, ast.AnnAssign]] = {}
        for stmt in self.source.tree(SERVER_ARGS).body:  # namespace classes first; ServerArgs' own annotations win
            call = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "collect_input_fields":
                for name in self._class_names(call.args[0]):
                    module, _, _ = self.evaluator.lookup(SERVER_ARGS, name)
                    fields.update(self._class_fields(module, name))
        fields.update(self._class_fields(SERVER_ARGS, "ServerArgs"))
        spec = []
        for name, (module, node) in fields.items():
            annotation = self._annotation(node.annotation, module, name)
            spec.append((name, annotation, dataclasses.field(default=None)) if node.value is not None else (name, annotation))
        return dataclasses.make_dataclass("ServerArgs", spec, kw_only=True)

    def _class_names(self, node: ast.expr) -> list[str]:
        if isinstance(node, ast.Name):
            _, binding, _ = self.evaluator.lookup(SERVER_ARGS, node.id)
            if isinstance(binding, ast.Assign):
                return self._class_names(binding.value)
        if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Name) for e in node.elts):
            return [e.id for e in node.elts if isinstance(e, ast.Name)]
        raise self._error(SERVER_ARGS, node, "collect_input_fields gets namespaces rig cannot list")

    def _class_fields(self, module: str, name: str) -> dict[str, tuple[str, ast.AnnAssign]]:
        classdef = self.source.classdef(module, name)
        fields: dict[str, tuple[str, ast.AnnAssign]] = {}
        for base in classdef.bases:
            if isinstance(base, ast.Name):
                try:
                    base_module, binding, _ = self.evaluator.lookup(module, base.id)
                except Unresolvable:
                    continue
                if isinstance(binding, ast.ClassDef):
                    fields.update(self._class_fields(base_module, base.id))
        for stmt in classdef.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and "ClassVar" not in ast.unparse(stmt.annotation) and ast.unparse(stmt.annotation) != "KW_ONLY":
                fields[stmt.target.id] = (module, stmt)
        return fields

    def _annotation(self, node: ast.expr, module: str, field: str) -> Any:
        """A field annotation as a typing object; unknown classes become stand-ins SGLang also maps to `str`."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self._annotation(ast.parse(node.value, mode="eval").body, module, field)
        if isinstance(node, ast.Constant) and node.value is None:
            return type(None)
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self._type_name(node, module, field)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return typing.Union[self._annotation(node.left, module, field), self._annotation(node.right, module, field)]  # noqa: UP007
        if isinstance(node, ast.Subscript):
            base = self._annotation(node.value, module, field)
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if base is typing.Annotated:
                inner = self._annotation(elements[0], module, field)
                metadata = [m for m in (self._metadata(e, module, field) for e in elements[1:]) if m is not None]
                return typing.Annotated[(inner, *metadata)] if metadata else inner
            if base is typing.Literal:
                return typing.Literal[tuple(self._strict(e, module, "Literal value") for e in elements)]
            try:
                return base[tuple(self._annotation(e, module, field) for e in elements) if len(elements) > 1
                            else self._annotation(elements[0], module, field)]
            except TypeError:
                return type(ast.unparse(node), (), {})
        return type(ast.unparse(node), (), {})

    def _type_name(self, node: ast.Name | ast.Attribute, module: str, field: str) -> Any:
        if isinstance(node, ast.Name):
            try:
                origin, binding, _ = self.evaluator.lookup(module, node.id)
            except Unresolvable:
                return type(node.id, (), {})
            if isinstance(binding, ast.Assign):
                return self._annotation(binding.value, origin, field)
        try:
            value = self.evaluator.value(node, module)
        except Unresolvable:
            return type(ast.unparse(node), (), {})
        if isinstance(value, ModuleRef):
            return type(ast.unparse(node), (), {})
        return value

    def _metadata(self, node: ast.expr, module: str, field: str) -> Any:
        if _is_text(node):
            return ""  # a bare help string: the field is a CLI flag
        if isinstance(node, ast.Call):
            try:
                factory = self.evaluator.value(node.func, module)
            except Unresolvable:
                return None  # NS(...), Derived(...) and other markers that are not Arg
            if factory is not self.arg_utils.Arg:
                return None
            if len(node.args) > 1 or (node.args and not _is_text(node.args[0])):
                raise self._error(module, node, "Arg() with positional arguments rig does not read")
            kwargs: dict[str, Any] = {}
            for keyword in node.keywords:
                key = keyword.arg or ""
                if key == "choices":
                    kwargs[key] = self._choices(keyword.value, module)
                    if kwargs[key] is None:
                        self._unchecked_fields.add(field)
                elif key == "type_parser":
                    kwargs[key] = None if _is_none(keyword.value) else str
                elif key == "action_kwargs":
                    if not isinstance(keyword.value, ast.Dict) or None in keyword.value.keys:
                        raise self._error(module, keyword.value, f"action_kwargs of {field} is not a literal dict")
                    kwargs[key] = {self._strict(k, module, "action_kwargs key"): self._keyed(self.evaluator.value(k, module), v, module)
                                   for k, v in zip(keyword.value.keys, keyword.value.values)}
                elif key in _GRAMMAR_KEYS:
                    kwargs[key] = self._strict(keyword.value, module, key)
                elif key == "const":
                    kwargs[key] = self._lenient(keyword.value, module)
            return self.arg_utils.Arg(**kwargs)
        try:
            value = self.evaluator.value(node, module)
        except Unresolvable:
            raise self._error(module, node, f"annotation metadata {ast.unparse(node)} of {field} is not readable") from None
        return value if isinstance(value, str) else None

    def _keyed(self, key: str, node: ast.expr, module: str) -> Any:
        return self._lenient(node, module) if key in _VALUE_KEYS else self._strict(node, module, key)

    # ---- values ------------------------------------------------------------------------------

    def _choices(self, node: ast.expr, module: str, local: dict[str, Any] | None = None) -> Any:
        try:
            return self.evaluator.value(node, module, local)
        except Unresolvable:
            return None  # computed at run time from a registry: left unchecked, reported

    def _strict(self, node: ast.expr, module: str, what: str, local: dict[str, Any] | None = None) -> Any:
        try:
            return self.evaluator.value(node, module, local)
        except Unresolvable as why:
            raise self._error(module, node, f"cannot read the {what} {ast.unparse(node)} ({why})") from None

    def _lenient(self, node: ast.expr, module: str, local: dict[str, Any] | None = None) -> Any:
        try:
            return self.evaluator.value(node, module, local)
        except Unresolvable:
            return Opaque(ast.unparse(node))

    def _error(self, module: str, node: ast.AST | None, problem: str) -> RigError:
        return RigError(self.source.wheel.name, self.source.where(module, node), problem,
                        "extend tests/oracles/engine_args.py for this release, or check the release against the recipe by hand")


def _is_text(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (_is_text(node.left) or _is_text(node.right))


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
