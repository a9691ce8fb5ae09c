#!/usr/bin/env python3
"""Recover E2B's envd protos from the published SDKs.

The PyPI `e2b` package ships envd's generated protobuf modules
(e2b/envd/process/process_pb.py, e2b/envd/filesystem/filesystem_pb.py), each
holding its serialized FileDescriptorProto; the npm `e2b` package embeds the
same descriptors, base64 encoded, in dist/index.js. This script reads both
without importing the SDK, checks that they agree, writes the Python SDK's
descriptors as a golden FileDescriptorSet (and the npm one beside it) and
prints them back as .proto text.

Usage: e2b-proto-extract.py SITE_PACKAGES NPM_PACKAGE_DIR OUT_DIR PY_VERSION NPM_VERSION
Needs the `protobuf` Python package (google.protobuf).
"""

import ast
import base64
import os
import re
import sys

from google.protobuf import descriptor_pb2 as d

FILES = [
    ("process/process.proto", "e2b/envd/process/process_pb.py"),
    ("filesystem/filesystem.proto", "e2b/envd/filesystem/filesystem_pb.py"),
]
NPM_BUNDLE = "dist/index.js"

F = d.FieldDescriptorProto
SCALARS = {
    F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64", F.TYPE_INT32: "int32", F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32", F.TYPE_BOOL: "bool", F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes", F.TYPE_UINT32: "uint32", F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64", F.TYPE_SINT32: "sint32", F.TYPE_SINT64: "sint64",
}
# File options this printer knows; anything else fails loudly.
FILE_OPTIONS = [
    "java_package", "java_outer_classname", "java_multiple_files", "go_package",
    "objc_class_prefix", "csharp_namespace", "php_namespace",
    "php_metadata_namespace", "ruby_package",
]


def python_descriptor(path):
    """Returns the bytes passed to file_desc(...) in a protoc-gen-py module."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "file_desc":
            return ast.literal_eval(node.args[0])
    sys.exit(f"{path}: no file_desc(...) call")


def npm_descriptors(path):
    """Returns the FileDescriptorProtos embedded by protobuf-es's fileDesc("...")."""
    text = open(path, encoding="utf-8").read()
    out = {}
    for b64 in re.findall(r'fileDesc\)?\(\s*"([A-Za-z0-9+/=]+)"', text):
        fd = d.FileDescriptorProto.FromString(base64.b64decode(b64 + "=" * (-len(b64) % 4)))
        out[fd.name] = fd
    return out


def default_json_name(name):
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper())
            upper = False
        else:
            out.append(c)
    return "".join(out)


def normalize(fd):
    """Drops what protobuf-es leaves out of embedded descriptors: default
    json_names and the dependency list (passed to fileDesc as arguments)."""
    fd = d.FileDescriptorProto.FromString(fd.SerializeToString())
    fd.ClearField("dependency")

    def walk(msgs):
        for m in msgs:
            for f in m.field:
                if f.json_name == default_json_name(f.name):
                    f.ClearField("json_name")
            walk(m.nested_type)

    walk(fd.message_type)
    return fd


def without_newer_fields(py, npm):
    """Returns py less the fields npm lacks, and their names: the two SDKs are
    released apart, so the newer one may carry fields the older lacks."""
    py = d.FileDescriptorProto.FromString(py.SerializeToString())
    extra = []

    def walk(pmsgs, nmsgs, scope):
        nby = {m.name: m for m in nmsgs}
        for m in pmsgs:
            n = nby.get(m.name)
            if n is None:
                continue
            numbers = {f.number for f in n.field}
            keep = [f for f in m.field if f.number in numbers]
            extra.extend(f"{scope}{m.name}.{f.name} = {f.number}" for f in m.field if f.number not in numbers)
            del m.field[:]
            m.field.extend(keep)
            walk(m.nested_type, n.nested_type, f"{scope}{m.name}.")

    walk(py.message_type, npm.message_type, py.package + ".")
    return py, extra


class Printer:
    def __init__(self, fd):
        self.fd = fd
        self.lines = []

    def emit(self, depth, text):
        self.lines.append(("  " * depth + text) if text else "")

    def type_name(self, f):
        if f.type in SCALARS:
            return SCALARS[f.type]
        prefix = "." + self.fd.package + "."
        if f.type_name.startswith(prefix):
            return f.type_name[len(prefix):]
        return f.type_name.lstrip(".")

    def field(self, depth, f, msg, optional_ok=True):
        check_empty(f.options, f"field {f.name} options")
        if f.HasField("default_value") or f.HasField("extendee"):
            sys.exit(f"field {f.name}: default or extension not supported")
        label = ""
        if f.label == F.LABEL_REPEATED:
            entry = self.map_entry(msg, f)
            if entry is not None:
                k, v = entry.field
                self.emit(depth, f"map<{self.type_name(k)}, {self.type_name(v)}> "
                                 f"{f.name} = {f.number}{self.json(f)};")
                return
            label = "repeated "
        elif f.proto3_optional:
            label = "optional "
        self.emit(depth, f"{label}{self.type_name(f)} {f.name} = {f.number}{self.json(f)};")

    def json(self, f):
        if f.HasField("json_name") and f.json_name != default_json_name(f.name):
            return f' [json_name = "{f.json_name}"]'
        return ""

    def map_entry(self, msg, f):
        if f.type != F.TYPE_MESSAGE:
            return None
        short = f.type_name.rsplit(".", 1)[-1]
        for n in msg.nested_type:
            if n.name == short and n.options.map_entry:
                return n
        return None

    def message(self, depth, m):
        opts = d.MessageOptions.FromString(m.options.SerializeToString())
        opts.ClearField("map_entry")
        check_empty(opts, f"message {m.name} options")
        if m.extension or m.extension_range or m.reserved_range or m.reserved_name:
            sys.exit(f"message {m.name}: extensions or reserved not supported")
        self.emit(depth, f"message {m.name} {{")
        for n in m.nested_type:
            if not n.options.map_entry:
                self.message(depth + 1, n)
        for e in m.enum_type:
            self.enum(depth + 1, e)
        real = {}
        for i, f in enumerate(m.field):
            if f.HasField("oneof_index") and not f.proto3_optional:
                real.setdefault(f.oneof_index, []).append(f)
        done = set()
        for f in m.field:
            if f.HasField("oneof_index") and not f.proto3_optional:
                if f.oneof_index in done:
                    continue
                done.add(f.oneof_index)
                check_empty(m.oneof_decl[f.oneof_index].options, "oneof options")
                self.emit(depth + 1, f"oneof {m.oneof_decl[f.oneof_index].name} {{")
                for g in real[f.oneof_index]:
                    self.field(depth + 2, g, m)
                self.emit(depth + 1, "}")
            else:
                self.field(depth + 1, f, m)
        self.emit(depth, "}")

    def enum(self, depth, e):
        check_empty(e.options, f"enum {e.name} options")
        self.emit(depth, f"enum {e.name} {{")
        for v in e.value:
            check_empty(v.options, f"enum value {v.name} options")
            self.emit(depth + 1, f"{v.name} = {v.number};")
        self.emit(depth, "}")

    def service(self, s):
        check_empty(s.options, f"service {s.name} options")
        self.emit(0, f"service {s.name} {{")
        for m in s.method:
            check_empty(m.options, f"method {m.name} options")
            cin = "stream " if m.client_streaming else ""
            sout = "stream " if m.server_streaming else ""
            t = lambda n: n[len("." + self.fd.package + "."):] if n.startswith("." + self.fd.package + ".") else n.lstrip(".")
            self.emit(1, f"rpc {m.name}({cin}{t(m.input_type)}) returns ({sout}{t(m.output_type)});")
        self.emit(0, "}")

    def file(self, header):
        fd = self.fd
        for line in header:
            self.emit(0, "// " + line if line else "//")
        self.emit(0, "")
        self.emit(0, f'syntax = "{fd.syntax or "proto2"}";')
        self.emit(0, "")
        self.emit(0, f"package {fd.package};")
        self.emit(0, "")
        if fd.dependency:
            for dep in fd.dependency:
                self.emit(0, f'import "{dep}";')
            self.emit(0, "")
        opts = d.FileOptions.FromString(fd.options.SerializeToString())
        for name in FILE_OPTIONS:
            if opts.HasField(name):
                v = getattr(opts, name)
                if isinstance(v, bool):
                    text = "true" if v else "false"
                else:
                    text = '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                self.emit(0, f"option {name} = {text};")
                opts.ClearField(name)
        check_empty(opts, "file options")
        for m in fd.message_type:
            self.emit(0, "")
            self.message(0, m)
        for e in fd.enum_type:
            self.emit(0, "")
            self.enum(0, e)
        for s in fd.service:
            self.emit(0, "")
            self.service(s)
        if fd.extension:
            sys.exit("extensions not supported")
        return "\n".join(self.lines) + "\n"


def check_empty(msg, what):
    if msg.ByteSize():
        sys.exit(f"{what}: unsupported: {msg}")


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    site, npm_dir, out, py_version, npm_version = sys.argv[1:]
    npm = npm_descriptors(os.path.join(npm_dir, NPM_BUNDLE))
    py_set, npm_set = d.FileDescriptorSet(), d.FileDescriptorSet()
    for proto_name, module in FILES:
        fd = d.FileDescriptorProto.FromString(python_descriptor(os.path.join(site, module)))
        if fd.name != proto_name:
            sys.exit(f"{module}: descriptor names {fd.name}, want {proto_name}")
        if proto_name not in npm:
            sys.exit(f"npm e2b {npm_version}: no embedded descriptor for {proto_name}")
        common, extra = without_newer_fields(fd, npm[proto_name])
        if normalize(common) != normalize(npm[proto_name]):
            sys.exit(f"{proto_name}: Python e2b {py_version} and npm e2b {npm_version} disagree")
        for f in extra:
            print(f"{proto_name}: only in Python e2b {py_version}: {f}")
        py_set.file.append(fd)
        npm_set.file.append(npm[proto_name])
        header = [
            f"Recovered from the E2B SDKs' serialized descriptors: do not edit;",
            f"regenerate with scripts/gen-e2b-proto.sh.",
            f"",
            f"Source: PyPI e2b=={py_version}, {module}",
            f"(the bytes passed to file_desc); checked against npm e2b@{npm_version},",
            f"{NPM_BUNDLE} (protobuf-es fileDesc): equal"
            + (" but for fields only the Python SDK has:" if extra else "."),
        ]
        header += [f"  {f}" for f in extra]
        header += [f"Descriptor file name: {proto_name}."]
        path = os.path.join(out, proto_name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as w:
            w.write(Printer(fd).file(header))
    os.makedirs(os.path.join(out, "testdata"), exist_ok=True)
    with open(os.path.join(out, "testdata", "python-sdk.binpb"), "wb") as w:
        w.write(py_set.SerializeToString(deterministic=True))
    with open(os.path.join(out, "testdata", "npm-sdk.binpb"), "wb") as w:
        w.write(npm_set.SerializeToString(deterministic=True))


if __name__ == "__main__":
    main()
