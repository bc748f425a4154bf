#!/usr/bin/env bash
# The PGXN distribution, checked the way PGXN would receive it: builds
# pg_outbox-<version>.zip from a commit with `git archive` (what `make dist` does), then
# checks that META.json in it follows the PGXN Meta spec 1.0.0 and says the version of
# pg_outbox.control, that every file it names is in the archive, that the archive holds
# what a build and `make installcheck` need, and nothing that only this repository's CI
# or a developer's checkout has (.gitattributes marks those export-ignore).
#
#   bash test/check_dist.sh [commit]     # default HEAD; uncommitted changes are not seen
#
# No PGXN validator is packaged for Debian or npm, so the spec's rules are written out
# below; the check first proves it rejects broken META.json files.
set -euo pipefail
cd "$(dirname "$0")/.."

ref=${1:-HEAD}
version=$(git show "$ref:pg_outbox.control" | sed -n "s/^default_version = '\(.*\)'/\1/p")
[ -n "$version" ] || { echo "dist: no default_version in $ref:pg_outbox.control"; exit 1; }
out=$(mktemp -d /tmp/pg_outbox_dist.XXXXXX)
trap 'rm -rf "$out"' EXIT
zip="$out/pg_outbox-$version.zip"
git archive --format=zip --prefix="pg_outbox-$version/" -o "$zip" "$ref"

# The files of the commit, so the archive can be compared with it.
git ls-tree -r --name-only "$ref" >"$out/tracked"

python3 - "$zip" "$version" "$out/tracked" <<'PY'
import json
import re
import sys
import zipfile

zip_path, version, tracked_path = sys.argv[1:4]
prefix = f"pg_outbox-{version}/"
tracked = set(open(tracked_path).read().split("\n")) - {""}

# --- The PGXN Meta spec 1.0.0, as rules on the decoded JSON ---------------------------

SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
VERSION_RANGE = re.compile(rf"^(([=!]=|[<>]=?)\s*)?({SEMVER}|0)(,\s*(([=!]=|[<>]=?)\s*)?{SEMVER})*$")
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd",
    "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit",
    "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay",
    "sun", "zlib", "open_source", "restricted", "unrestricted", "unknown",
}


def is_str(v, min_len=1):
    return isinstance(v, str) and len(v) >= min_len


def is_term(v):
    return is_str(v, 2) and not re.search(r"[/\\\s\x00-\x1f\x7f]", v)


def is_semver(v):
    return isinstance(v, str) and re.fullmatch(SEMVER, v) is not None


def is_path(v):
    # Relative, inside the distribution, with forward slashes.
    return is_str(v, 2) and not v.startswith("/") and "\\" not in v and ".." not in v.split("/")


def is_uri(v):
    return isinstance(v, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$", v) is not None


def is_email(v):
    return isinstance(v, str) and re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v) is not None


def extension_key(k):
    return re.match(r"^[xX]_.", k) is not None


def check_object(errors, where, obj, known, required=(), one_of=()):
    """An object of the known keys (and x_ ones), with the required ones present."""
    if not isinstance(obj, dict):
        errors.append(f"{where}: not an object")
        return False
    for k in obj:
        if k not in known and not extension_key(k):
            errors.append(f"{where}: unknown key {k!r}")
    for k in required:
        if k not in obj:
            errors.append(f"{where}: missing {k!r}")
    if one_of and not any(k in obj for k in one_of):
        errors.append(f"{where}: needs one of {', '.join(one_of)}")
    return True


def unique_list(v, item_ok):
    return isinstance(v, list) and v and len(set(map(json.dumps, v))) == len(v) and all(map(item_ok, v))


def validate(meta):
    errors = []
    top = {"name", "version", "abstract", "maintainer", "license", "provides", "meta-spec",
           "description", "generated_by", "tags", "no_index", "prereqs", "release_status", "resources"}
    if not check_object(errors, "META.json", meta, top,
                        required=("name", "version", "abstract", "maintainer", "license", "provides", "meta-spec")):
        return errors
    if "name" in meta and not is_term(meta["name"]):
        errors.append("name: not a term (2+ characters, no slash, backslash, space or control)")
    if "version" in meta and not is_semver(meta["version"]):
        errors.append(f"version: {meta['version']!r} is not a semantic version")
    for k in ("abstract", "description", "generated_by"):
        if k in meta and not is_str(meta[k]):
            errors.append(f"{k}: not a non-empty string")
    m = meta.get("maintainer")
    if m is not None and not (is_str(m) or unique_list(m, is_str)):
        errors.append("maintainer: neither a string nor a list of distinct strings")
    lic = meta.get("license")
    if lic is not None and not (
            lic in LICENSES if isinstance(lic, str) else
            unique_list(lic, lambda x: x in LICENSES) if isinstance(lic, list) else
            isinstance(lic, dict) and lic and all(map(is_uri, lic.values()))):
        errors.append(f"license: {lic!r} is not a license of the spec (or a name => URL object)")
    provides = meta.get("provides")
    if provides is not None:
        if not isinstance(provides, dict) or not provides:
            errors.append("provides: not a non-empty object")
        else:
            for ext, p in provides.items():
                where = f"provides.{ext}"
                if not is_term(ext):
                    errors.append(f"{where}: not a term")
                if check_object(errors, where, p, {"file", "version", "abstract", "docfile", "docpath"},
                                required=("file", "version")):
                    for k in ("file", "docfile"):
                        if k in p and not is_path(p[k]):
                            errors.append(f"{where}.{k}: not a relative path")
                    if "version" in p and not is_semver(p["version"]):
                        errors.append(f"{where}.version: not a semantic version")
                    for k in ("abstract", "docpath"):
                        if k in p and not is_str(p[k]):
                            errors.append(f"{where}.{k}: not a non-empty string")
    spec = meta.get("meta-spec")
    if spec is not None and check_object(errors, "meta-spec", spec, {"version", "url"}, required=("version",)):
        if not re.fullmatch(r"1\.0\.\d+", str(spec.get("version"))):
            errors.append("meta-spec.version: not 1.0.x")
        if "url" in spec and spec["url"] not in ("https://pgxn.org/meta/spec.txt", "http://pgxn.org/meta/spec.txt"):
            errors.append("meta-spec.url: not the spec's address")
    tags = meta.get("tags")
    if tags is not None and not unique_list(
            tags, lambda t: isinstance(t, str) and 2 <= len(t) <= 255 and not re.search(r"[/\\\x00-\x1f\x7f]", t)):
        errors.append("tags: not a list of distinct tags (2-255 characters, no slash or backslash)")
    ni = meta.get("no_index")
    if ni is not None and check_object(errors, "no_index", ni, {"file", "directory"}, one_of=("file", "directory")):
        for k in ("file", "directory"):
            if k in ni and not (is_path(ni[k]) or unique_list(ni[k], is_path)):
                errors.append(f"no_index.{k}: not a path or a list of distinct paths")
    prereqs = meta.get("prereqs")
    phases = ("configure", "build", "test", "runtime", "develop")
    relations = ("requires", "recommends", "suggests", "conflicts")
    if prereqs is not None and check_object(errors, "prereqs", prereqs, set(phases), one_of=phases):
        for ph in phases:
            if ph not in prereqs:
                continue
            if not check_object(errors, f"prereqs.{ph}", prereqs[ph], set(relations), one_of=relations):
                continue
            for rel in relations:
                reqs = prereqs[ph].get(rel)
                if reqs is None:
                    continue
                if not isinstance(reqs, dict) or not reqs:
                    errors.append(f"prereqs.{ph}.{rel}: not a non-empty object")
                    continue
                for name, rng in reqs.items():
                    if not is_term(name):
                        errors.append(f"prereqs.{ph}.{rel}: {name!r} is not a term")
                    if not (rng == 0 and not isinstance(rng, bool)) and not (
                            isinstance(rng, str) and VERSION_RANGE.match(rng)):
                        errors.append(f"prereqs.{ph}.{rel}.{name}: {rng!r} is not a version range")
    if "release_status" in meta and meta["release_status"] not in ("stable", "testing", "unstable"):
        errors.append("release_status: not stable, testing or unstable")
    res = meta.get("resources")
    if res is not None and check_object(errors, "resources", res, {"homepage", "bugtracker", "repository"},
                                        one_of=("homepage", "bugtracker", "repository")):
        if "homepage" in res and not is_uri(res["homepage"]):
            errors.append("resources.homepage: not a URI")
        bt = res.get("bugtracker")
        if bt is not None and check_object(errors, "resources.bugtracker", bt, {"web", "mailto"},
                                           one_of=("web", "mailto")):
            if "web" in bt and not is_uri(bt["web"]):
                errors.append("resources.bugtracker.web: not a URI")
            if "mailto" in bt and not is_email(bt["mailto"]):
                errors.append("resources.bugtracker.mailto: not an e-mail address")
        repo = res.get("repository")
        if repo is not None and check_object(errors, "resources.repository", repo, {"url", "web", "type"}):
            if not ({"url", "type"} <= repo.keys() or "web" in repo):
                errors.append("resources.repository: needs url and type, or web")
            for k in ("url", "web"):
                if k in repo and not is_uri(repo[k]):
                    errors.append(f"resources.repository.{k}: not a URI")
            if "type" in repo and not re.fullmatch(r"[a-z]+", str(repo["type"])):
                errors.append("resources.repository.type: not lower-case letters")
    return errors


def project_rules(meta, names, control_version):
    """What this distribution promises beyond the spec."""
    errors = []
    if meta.get("name") != "pg_outbox":
        errors.append("name: not pg_outbox")
    if meta.get("version") != control_version:
        errors.append(f"version: {meta.get('version')!r}, pg_outbox.control says {control_version!r}")
    ext = (meta.get("provides") or {}).get("pg_outbox")
    if not isinstance(ext, dict):
        errors.append("provides: no pg_outbox")
        return errors
    if ext.get("version") != control_version:
        errors.append(f"provides.pg_outbox.version: {ext.get('version')!r}, not {control_version!r}")
    for k in ("file", "docfile"):
        if k in ext and ext[k] not in names:
            errors.append(f"provides.pg_outbox.{k}: {ext[k]} is not a file of the distribution")
    script = re.search(r"pg_outbox--(.+)\.sql$", str(ext.get("file")))
    if script and script.group(1) != control_version:
        errors.append(f"provides.pg_outbox.file: {ext['file']} is not the {control_version} extension")
    return errors


# --- The validator must be able to say no ---------------------------------------------

good = {"name": "pair", "version": "0.1.8", "abstract": "A key/value pair data type",
        "maintainer": "someone <someone@example.org>", "license": "postgresql",
        "provides": {"pair": {"file": "sql/pair.sql", "version": "0.1.8"}},
        "meta-spec": {"version": "1.0.0"},
        "prereqs": {"runtime": {"requires": {"PostgreSQL": ">= 15.0.0, < 16.0.0"}}}}
assert validate(good) == [], validate(good)
broken = {
    "no license": {k: v for k, v in good.items() if k != "license"},
    "short version": dict(good, version="0.3"),
    "unknown license": dict(good, license="wtfpl"),
    "unknown key": dict(good, homepage="https://example.org"),
    "provides without file": dict(good, provides={"pair": {"version": "0.1.8"}}),
    "absolute file": dict(good, provides={"pair": {"file": "/sql/pair.sql", "version": "0.1.8"}}),
    "spec 2": dict(good, **{"meta-spec": {"version": "2.0.0"}}),
    "bad range": dict(good, prereqs={"runtime": {"requires": {"PostgreSQL": "15+"}}}),
    "unknown phase": dict(good, prereqs={"install": {"requires": {"PostgreSQL": "15.0.0"}}}),
    "bad status": dict(good, release_status="beta"),
}
accepted = [why for why, meta in broken.items() if not validate(meta)]
if accepted:
    sys.exit(f"dist: the META.json check accepts broken files: {', '.join(accepted)}")
for wrong_file in ("nowhere.sql", "extension/pg_outbox--0.0.1.sql"):
    if not project_rules(dict(good, name="pg_outbox", provides={"pg_outbox": {"file": wrong_file, "version": version}}),
                         {"extension/pg_outbox--0.0.1.sql"}, version):
        sys.exit(f"dist: the META.json check accepts {wrong_file} as the extension's file")

# --- The archive ---------------------------------------------------------------------

with zipfile.ZipFile(zip_path) as z:
    entries = z.namelist()
    outside = [e for e in entries if not e.startswith(prefix)]
    names = {e[len(prefix):] for e in entries if e.startswith(prefix) and not e.endswith("/")}
    meta_text = z.read(prefix + "META.json").decode() if "META.json" in names else None
    control = z.read(prefix + "pg_outbox.control").decode() if "pg_outbox.control" in names else ""

problems = [f"outside {prefix}: {e}" for e in outside]

# What a PGXN user needs: the build, the install and update scripts' sources, the
# released scripts, the library's sources, and `make installcheck` (sql/, expected/ and
# its server check).
required = ["META.json", "pg_outbox.control", "Makefile", "README.md", "test/installcheck_server.sql"]
needed_trees = ("extension/", "src/", "sql/", "expected/")
for f in required:
    if f not in names:
        problems.append(f"missing {f}")
for f in sorted(t for t in tracked if t.startswith(needed_trees)):
    if f not in names:
        problems.append(f"missing {f} (tracked in the commit)")
for tree in needed_trees:
    if not any(n.startswith(tree) for n in names):
        problems.append(f"missing {tree}")
if not any(re.fullmatch(r"extension/src/.+\.sql", n) for n in names):
    problems.append("missing the install script's sources (extension/src/*.sql)")

# What does not belong: this repository's CI and VCS files, build and test output, and
# the scripts make generates (a stale copy would win over the sources).
junk = re.compile(r"""(^|/)(\.git(/|$)|\.gitignore$|\.gitattributes$|node_modules/|__pycache__/|build/|
                      tmp_check/|results/|log/|regression\.(diffs|out)$)|^\.ci/|
                      \.(o|so|bc|pyc)$|^extension/pg_outbox--[^/]*{v}\.sql$""".format(v=re.escape(version)),
                  re.X)
problems += [f"does not belong in the distribution: {n}" for n in sorted(names) if junk.search(n)]
problems += [f"not a file of the commit: {n}" for n in sorted(names - tracked)]

if meta_text is None:
    problems.append("no META.json to validate")
else:
    try:
        meta = json.loads(meta_text)
    except ValueError as err:
        problems.append(f"META.json is not JSON: {err}")
    else:
        m = re.search(r"^default_version = '([^']*)'", control, re.M)
        problems += [f"META.json: {e}" for e in validate(meta)]
        problems += [f"META.json: {e}" for e in project_rules(meta, names, m.group(1) if m else None)]

if problems:
    print("\n".join(f"dist: {p}" for p in problems))
    sys.exit(f"dist: pg_outbox-{version}.zip: {len(problems)} problem(s)")
print(f"dist: pg_outbox-{version}.zip: {len(names)} files; META.json valid (PGXN Meta 1.0.0, "
      f"version {version}); sources present, no junk; the check rejected {len(broken) + 2} broken META.json files")
PY
