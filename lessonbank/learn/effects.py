"""Effects: what a call does to the world beyond computing a value, and whether a task asked for it.

A call has a sensitive effect when it reaches the network (``requests``, ``urllib``, ``socket``, ``smtplib``...,
or a tool passed a URL, a host or an e-mail address), reads the environment (``os.environ``, ``os.getenv``),
makes, writes, moves or deletes files (``open(..., "w")``, ``os.makedirs``, ``os.remove``, ``shutil``,
``Path.mkdir``, ``Path.unlink``, ``df.to_csv``), runs a process or code (``subprocess``, ``os.system``, ``exec``),
or calls a tool whose name says it changes something outside the run (delete, drop, send, post, pay,
transfer...). A task asks for such a call when it names the call, the call's target (its URL or host, address,
variable or path), or the effect's verb (``delete`` for ``delete_order``); a task in another language names none
of them, and the call waits for a user.

``sites`` lists the calls of a piece of code (imports resolved: ``from os import environ`` reads the
environment too), each with its target literals and its effect; ``of_name`` gives the effect of a name a prose
lesson mentions, and ``python_own`` whether it is one of Python's own that only computes a value (``re.sub``).
"""

from __future__ import annotations

import ast
import builtins
import datetime
import json
import re
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from lessonbank.learn import code as pycode

NETWORK_MODULES = frozenset({"requests", "urllib", "urllib3", "http", "httpx", "aiohttp", "socket", "smtplib",
                             "ftplib", "telnetlib", "paramiko", "websocket", "websockets", "pycurl", "imaplib",
                             "poplib", "xmlrpc", "webbrowser", "ssl"})
PROCESS_MODULES = frozenset({"subprocess", "pty", "multiprocessing"})
PROCESS_CALLS = frozenset({"os.system", "os.popen", "os.execv", "os.execl", "os.execvp", "os.execlp", "os.spawnl",
                           "os.spawnv", "os.fork", "os.kill", "exec", "eval", "compile", "__import__"})
ENVIRONMENT = frozenset({"os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv", "os.unsetenv"})
FILE_CALLS = frozenset({"os.remove", "os.unlink", "os.rmdir", "os.removedirs", "os.rename", "os.renames",
                        "os.replace", "os.truncate", "os.ftruncate", "os.chmod", "os.lchmod", "os.fchmod", "os.chown",
                        "os.lchown", "os.fchown", "os.link", "os.symlink", "os.write", "os.mkdir", "os.makedirs",
                        "os.mkfifo", "os.mknod", "os.utime"})
FILE_MODULES = frozenset({"shutil"})
FILE_METHODS = frozenset({"unlink", "rmdir", "mkdir", "write_text", "write_bytes", "rename", "replace", "touch",
                          "chmod", "lchmod", "symlink_to", "hardlink_to", "rmtree", "copy_into", "move_into"})
MOVE_METHODS = frozenset({"rename", "replace"})  # a file's, or a string's or a data frame's
# a path's copy and move (``pathlib.Path.copy``): written on ``pathlib`` only, ``dict.copy`` writes no file
PATH_COPIES = frozenset({"copy", "move"})
# calls that only compute or show a value: a URL among their arguments goes nowhere
SHOWING = pycode.PURE_CALLS | {"print", "pprint", "display", "repr", "format"}
WRITER_METHODS = frozenset({"to_csv", "to_json", "to_excel", "to_parquet", "to_pickle", "to_sql", "to_feather",
                            "to_hdf", "savefig"})
DUMPERS = frozenset({"json.dump", "pickle.dump", "yaml.dump", "marshal.dump", "csv.writer"})
# Standard-library modules whose names can write, delete, run code or a process, read the environment or reach the
# network or the terminal: a name of theirs is judged as any other's (``os.path`` only reads).
TOUCHING_MODULES = NETWORK_MODULES | PROCESS_MODULES | FILE_MODULES | frozenset({
    "os", "pathlib", "io", "tempfile", "fileinput", "sqlite3", "shelve", "dbm", "pickle", "marshal", "zipfile",
    "tarfile", "gzip", "bz2", "lzma", "zipimport", "pkgutil", "importlib", "runpy", "code", "codeop", "pdb", "bdb",
    "trace", "profile", "cProfile", "timeit", "doctest", "unittest", "ctypes", "signal", "resource", "sys",
    "builtins", "asyncio", "concurrent", "threading", "_thread", "logging", "syslog", "mmap", "fcntl", "select",
    "selectors", "socketserver", "wsgiref", "nntplib", "mailbox", "atexit", "faulthandler", "readline", "getpass",
    "tty", "termios", "ensurepip", "venv", "winreg", "msvcrt", "_winapi", "posix", "nt"})
READ_ONLY = ("os.path.",)
# types whose methods only compute a value: a method of theirs named bare is Python's own (``strip``, ``strptime``)
VALUE_TYPES = (str, bytes, bytearray, list, tuple, dict, set, frozenset, int, float, complex, datetime.datetime,
               datetime.time, datetime.timedelta)
# builtins that run code, write, read the terminal or reach past a value: judged as any other name
TOUCHING_BUILTINS = frozenset({"open", "exec", "eval", "compile", "__import__", "input", "breakpoint", "exit",
                               "quit", "getattr", "setattr", "delattr", "globals", "locals", "vars"})
# Verbs a tool's name uses for an effect outside the run, each with what a task says to ask for it.
TOOL_VERBS = ("delete", "remove", "drop", "destroy", "erase", "purge", "wipe", "truncate", "clear", "reset",
              "cancel", "revoke", "kill", "terminate", "shutdown", "disable", "send", "post", "mail", "email",
              "upload", "publish", "share", "forward", "notify", "transfer", "pay", "charge", "refund", "withdraw",
              "deposit", "buy", "purchase", "sell", "execute", "exec", "shell", "write", "overwrite", "update",
              "insert", "modify", "grant", "approve", "submit", "push", "deploy", "commit", "save", "create",
              "move", "rename", "book", "subscribe", "unsubscribe", "invite", "sync", "run_command")
# A name that starts with one of these reads: ``get_posts`` and ``list_charges`` post and charge nothing.
READ_VERBS = frozenset({"get", "list", "fetch", "read", "search", "find", "lookup", "query", "count", "describe",
                        "show", "check", "calc", "calculate", "compute", "is", "has", "load", "view", "summarize"})
# A host's last label that is a file's extension: ``sales.csv`` is a file, ``collector.example/sync`` a host.
FILE_EXTENSIONS = frozenset({"csv", "tsv", "json", "jsonl", "txt", "xml", "pdf", "py", "md", "log", "html", "htm",
                             "xlsx", "xls", "parquet", "yaml", "yml", "dat", "zip", "gz", "tar", "png", "jpg", "db",
                             "sqlite", "ini", "cfg", "toml", "sh", "js", "ts", "doc", "docx", "pkl"})
SUFFIXES = frozenset({"", "e", "s", "es", "ed", "d", "ing", "ion", "ions", "al", "er", "ers", "ment", "ments"})
FILE_VERBS = ("write", "save", "store", "create", "delete", "remove", "erase", "export", "copy", "move", "rename",
              "overwrite", "append", "dump")
PROCESS_VERBS = ("shell", "command", "subprocess", "terminal", "execute", "bash")
_WORD = re.compile(r"[A-Za-z][a-z]*|[A-Z]+(?![a-z])")
# where a call goes on the network: a URL, a host with a path or a port, an e-mail address, an IP address
_TARGET = re.compile(r"(?i)^(?:[a-z][a-z0-9+.-]{1,9}://\S+|www\.\S+|(?:[a-z0-9-]{1,63}\.){1,8}([a-z]{2,24})"
                     r"(?::\d{1,5}(?:/\S*)?|/\S*)|[^\s@]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){1,4}"
                     r"|\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?:/\S*)?)$")
_PATH = re.compile(r"^(?:~|\.{1,2})?/[\w./~-]{1,200}$|^[\w.-]{1,80}/[\w./-]{1,200}$|^[A-Za-z]:\\\S{1,200}$")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w{0,60}(?:\.[A-Za-z_]\w{0,60}){0,4}")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]{0,40}(?:_[A-Z0-9]{1,40}){1,6}$")
MAX_SITES = 200


@dataclass(frozen=True)
class Site:
    """One call (or read of the environment) in a piece of code: what it calls (dotted, imports resolved), the
    literals that name its target (URLs, hosts, e-mail addresses, paths, variable names), its sensitive effect
    ("" when none) and the statement it is in."""

    callee: str
    targets: tuple[str, ...]
    effect: str
    node: ast.AST
    line: str


def words(text: str) -> list[str]:
    """The lower-case words of ``text`` and of an identifier (``deleteAllOrders``, ``delete_all_orders``)."""
    return [word.lower() for word in _WORD.findall(text)]


def _inflects(word: str, verb: str) -> bool:
    """``word`` is ``verb`` or a form of it (``deleting``, ``deletion``, ``payment``, ``transferred``)."""
    stem = verb[:-1] if verb.endswith("e") else verb
    if not word.startswith(stem):
        return False
    rest = word[len(stem):]
    return rest in SUFFIXES or (rest[:1] == stem[-1:] and rest[1:] in ("ed", "ing", "er"))


def tool_verb(name: str) -> str:
    """The verb of ``TOOL_VERBS`` that a tool's name says it does ("" when none, or when the name starts with a
    verb that reads)."""
    found = words(name)
    if found and found[0] in READ_VERBS:
        return ""
    for verb in TOOL_VERBS:
        parts = verb.split("_")
        if len(parts) > 1:
            if "_".join(found).find(verb) >= 0:
                return verb
        elif any(_inflects(word, verb) for word in found):
            return verb
    return ""


def network_target(value: str) -> bool:
    """Whether a literal names a place on the network: a URL, a host with a path or a port (not a file such as
    ``sales.csv/...``), an e-mail address or an IP address."""
    match = _TARGET.match(value.strip())
    return match is not None and (match.group(1) or "").lower() not in FILE_EXTENSIONS


def is_target(value: str) -> bool:
    """Whether a literal names where a call goes: a URL, a host, an e-mail address, a path or a variable name."""
    value = value.strip()
    return bool(value) and len(value) <= 300 and bool(
        network_target(value) or _PATH.match(value) or _ENV_NAME.match(value))


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> what it was imported as (``r`` -> ``requests``, ``urlopen`` -> ``urllib.request.urlopen``)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                found[alias.asname or root] = alias.name if alias.asname else root
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def dotted(node: ast.AST, imports: dict[str, str]) -> str:
    """The dotted name of an expression (``requests.post``, ``os.environ``), imports resolved; ``.name`` for a
    method of a value that is not a name (``Path(p).unlink`` -> ``.unlink``); "" for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(imports.get(node.id, node.id))
    elif parts:
        parts.append("")
    return ".".join(reversed(parts))


def effect_of(callee: str, call: ast.Call | None = None, tools: Collection[str] | None = None,
              targets: Iterable[str] = ()) -> str:
    """The sensitive effect of calling ``callee`` ("" when none): network, environment, files, a process, or
    the verb of a tool's name; a call passed a URL, a host or an e-mail address reaches the network."""
    root, method = callee.split(".")[0], callee.rsplit(".", 1)[-1]
    if root in NETWORK_MODULES:
        return "network"
    if callee in ENVIRONMENT or any(callee.startswith(name + ".") for name in ENVIRONMENT) or root == "dotenv":
        return "environment"
    if root in PROCESS_MODULES or callee in PROCESS_CALLS:
        return "process"
    if callee in FILE_CALLS or root in FILE_MODULES or (root == "" or "." in callee) and method in FILE_METHODS and (
            method not in MOVE_METHODS or call is None or _moves(call)):
        return "file write"
    if root == "pathlib" and method in PATH_COPIES:
        return "file write"
    if call is not None and _writes(callee, method, call):
        return "file write"
    if "." not in callee and (tools is None or callee in tools) and (verb := tool_verb(callee)):
        return f"a tool that does '{verb}'"
    if callee not in SHOWING and any(network_target(target) for target in targets):
        return "network"
    return ""


def _moves(call: ast.Call) -> bool:
    """``Path(p).rename(target)`` or ``.replace(target)``: one argument, not a mapping (``str.replace(a, b)`` and
    ``df.rename(columns={...})`` move no file)."""
    return len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Dict | ast.Lambda)


def _writes(callee: str, method: str, call: ast.Call) -> bool:
    """``open(path, "w")`` (any mode that writes), a dumper given a file, a data frame written to a path."""
    if callee in ("open", "io.open", "codecs.open", ".open") or method == "open" and "." in callee:
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))
    if callee in DUMPERS:
        return len(call.args) > 1 or callee == "csv.writer"
    return method in WRITER_METHODS and "." in callee and bool(call.args or call.keywords)


def _constants(tree: ast.AST) -> dict[str, list[str]]:
    """Name -> the strings its assignments hold (``url = "collector.example/" + path``): a target passed by name."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            strings = [n.value for n in ast.walk(node.value)
                       if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            for target in targets:
                for name in pycode.names(target, ast.Store):
                    found.setdefault(name, []).extend(strings)
    return found


def _targets(call: ast.AST, constants: dict[str, list[str]]) -> tuple[str, ...]:
    """The target literals a call passes: its string arguments (in f-strings, concatenations and names too)."""
    found: list[str] = []
    for node in ast.walk(call):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.extend(constants.get(node.id, ()))
    return tuple(dict.fromkeys(value.strip() for value in found if is_target(value)))


def _headers(stmt: ast.stmt) -> list[ast.AST] | None:
    """What a statement evaluates itself: the whole of a simple statement, the header of a compound one (a
    loop's iterable, a test, a ``with``'s items); None for a definition, whose body runs only when called."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return None
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.iter]
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Try):
        return []
    return [stmt]


def sites(code: str, tools: Collection[str] | None = None) -> list[Site]:
    """The calls of ``code`` and its reads of ``os.environ``, in order, each with its targets and effect (see the
    module; ``tools``: the agent's, else the names the code calls without defining them); [] when the code does
    not parse."""
    try:
        tree = ast.parse(code)
    except pycode.UNPARSABLE:
        return []
    known = set(tools) if tools is not None else (pycode.called(code) or set())
    return sites_in(tree.body, known)


def sites_in(statements: list[ast.stmt], tools: Collection[str]) -> list[Site]:
    """``sites`` of parsed ``statements`` (the nodes are theirs: ``flow`` can say which reach the answer)."""
    module = ast.Module(body=statements, type_ignores=[])
    imports, constants = _imports(module), _constants(module)
    found: list[Site] = []
    for stmt in ast.walk(module):
        headers = _headers(stmt) if isinstance(stmt, ast.stmt) else None
        if not headers:
            continue
        line = ast.unparse(stmt).split("\n", 1)[0][:200]
        nodes = [node for header in headers for node in ast.walk(header)]
        inner = {id(n.func) for n in nodes if isinstance(n, ast.Call)} | {
            id(n.value) for n in nodes if isinstance(n, ast.Subscript | ast.Attribute)}
        for node in nodes:
            if isinstance(node, ast.Call):
                callee = dotted(node.func, imports)
                if not callee or callee == "final_answer":
                    continue
                targets = _targets(node, constants)
                found.append(Site(callee, targets, effect_of(callee, node, tools, targets), node, line))
            elif isinstance(node, ast.Subscript) and dotted(node.value, imports) in ENVIRONMENT:
                found.append(Site(dotted(node.value, imports), _targets(node.slice, constants), "environment", node,
                                  line))
            elif isinstance(node, ast.Attribute | ast.Name) and id(node) not in inner and dotted(
                    node, imports) in ENVIRONMENT:
                found.append(Site(dotted(node, imports), (), "environment", node, line))
        if len(found) >= MAX_SITES:
            break
    return found[:MAX_SITES]


def call_site(name: str, arguments: object, tools: Collection[str] | None = None) -> Site:
    """The site of a tool call sent as a name and JSON arguments (a ToolCallingAgent's)."""
    values = [value for value in _json_strings(arguments) if is_target(value)]
    targets = tuple(dict.fromkeys(value.strip() for value in values))
    line = f"{name}({json.dumps(arguments, ensure_ascii=False)[:180]})"
    return Site(name, targets, effect_of(name, None, tools, targets), ast.Constant(None), line)


def _json_strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [item for v in value.values() for item in _json_strings(v)]
    if isinstance(value, list):
        return [item for v in value for item in _json_strings(v)]
    return [value] if isinstance(value, str) else []


def _host(target: str) -> str:
    """The host of a URL or host target (``collector.example`` of ``https://collector.example/sync``)."""
    rest = target.split("://", 1)[-1]
    return rest.split("/", 1)[0].split("@")[-1].lower()


def asked(site: Site, task: str) -> bool:
    """Whether ``task`` asks for the call: it names the call, each target the call passes (a URL by its host),
    or, for a call without a target of its own, the verb of its effect (see the module)."""
    lowered = task.lower()
    if site.targets:
        return all(target.lower() in lowered or (network_target(target) and _host(target) in lowered)
                   for target in site.targets)
    name = site.callee.rsplit(".", 1)[-1].lower()
    if name and len(name) >= 3 and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", lowered):
        return True
    said = words(task)
    if site.effect.startswith("a tool that does"):
        verb = tool_verb(site.callee)
        return any(_inflects(word, part) for part in verb.split("_") for word in said)
    if site.effect == "file write":
        return any(_inflects(word, verb) for verb in FILE_VERBS for word in said)
    if site.effect == "process":
        return any(_inflects(word, verb) for verb in PROCESS_VERBS for word in said)
    return False


def python_own(name: str, tools: Collection[str] = ()) -> bool:
    """Whether ``name`` is one of Python's own that only computes a value: a builtin (``len``), a method of a
    builtin type (``str.replace``, ``dict.get``, or bare: ``append``) or a name of a standard-library module
    (``re.sub``, ``json.loads``); not an agent's tool, nor a name with a sensitive effect (``effect_of``) or of a
    module or builtin that can have one (``os.remove``, ``open``, ``exec``, ``getattr``, ``json.dump``), nor of a
    module outside the standard library (``requests.get``: a method's name says nothing of a module's). Every run
    knows these names: an observation that shows one introduces nothing."""
    name = name.strip().removesuffix("()").strip()
    if not _DOTTED_NAME.fullmatch(name):
        return False
    parts = name.split(".")
    root = parts[0]
    if name in tools or root in tools:
        return False
    kind = getattr(builtins, root, None)
    if len(parts) == 2 and isinstance(kind, type) and not parts[1].startswith("_"):
        return hasattr(kind, parts[1])  # ``str.replace`` moves no file
    if len(parts) == 1 and kind is None:
        return _value_method(name)
    if of_touching(name) or name in DUMPERS or parts[-1] in WRITER_METHODS or parts[-1] == "open" \
            or effect_of(name, None, tools):
        return False  # what it does depends on how it is called (``codecs.open(p, "w")``): judged as any other
    return root in pycode.BUILTINS if len(parts) == 1 else root in sys.stdlib_module_names


def of_touching(name: str) -> bool:
    """Whether ``name`` belongs to a builtin or a standard-library module that can write, delete, run code or reach
    past a value (``exec``, ``getattr``, ``os.makedirs``, ``pickle.loads``; not ``os.path``, which only reads),
    whatever its own name says."""
    root = name.split(".")[0]
    return root in TOUCHING_BUILTINS or (root in TOUCHING_MODULES and not name.startswith(READ_ONLY))


def _value_method(name: str) -> bool:
    """A method of a value of Python's own named bare, as its own errors name one (``append() takes exactly one
    argument``, ``strptime() argument 1 must be str``), when no tool could be meant by it (``update``, ``clear``
    and ``remove`` could: ``effect_of`` reads them as a tool's verb)."""
    return not name.startswith("_") and any(hasattr(kind, name) for kind in VALUE_TYPES) and not effect_of(name)


def of_name(name: str, tools: Collection[str] | None = None) -> str:
    """The sensitive effect of a name a prose lesson mentions as a call (``os.environ``, ``requests.post``, a
    tool that deletes), "" when none."""
    name = name.strip().rstrip("()").strip()
    if not re.fullmatch(r"[A-Za-z_][\w.]{0,100}", name):
        return ""
    return effect_of(name, None, tools)
