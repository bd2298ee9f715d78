//! The C header: the checked-in include/polylb.h is exactly what build.rs generates with
//! cbindgen, it compiles alone as C11 and as C++17 with every warning an error, and its
//! constants agree with the library (versions, status codes, outcomes, status texts), and
//! docs/abi-contract.md's C block agrees with it.

use polylb::ffi;
use polylb::{Outcome, Status};
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What build.rs generated from src/ffi.rs for this build.
const GENERATED: &str = include_str!(concat!(env!("OUT_DIR"), "/polylb.h"));

const REFRESH: &str = "refresh it with `POLYLB_WRITE_HEADER=1 cargo build --release` and commit \
                       include/polylb.h";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn checked_in() -> String {
    std::fs::read_to_string(root().join("include/polylb.h")).expect("include/polylb.h exists")
}

#[test]
fn checked_in_header_is_the_generated_one() {
    let current = checked_in();
    if current == GENERATED {
        return;
    }
    let (mut old, mut new) = (current.lines(), GENERATED.lines());
    let mut line = 1;
    let first_difference = loop {
        match (old.next(), new.next()) {
            (Some(a), Some(b)) if a == b => line += 1,
            (a, b) => break (a, b),
        }
    };
    panic!(
        "include/polylb.h differs from the header cbindgen generates from src/ffi.rs; {REFRESH}.\n\
         First difference at line {line}:\n  checked in: {:?}\n  generated:  {:?}",
        first_difference.0.unwrap_or("<end of file>"),
        first_difference.1.unwrap_or("<end of file>"),
    );
}

/// `#define NAME value` lines with an integer value, in header order.
fn defines(header: &str) -> Vec<(String, i64)> {
    header
        .lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("#define ")?.split_whitespace();
            let name = words.next()?;
            let value = words.next()?.parse().ok()?;
            Some((name.to_string(), value))
        })
        .collect()
}

/// `PLB_ERR_NULL_POINTER` → `NullPointer` (the Debug name of the matching Rust variant).
fn camel(words: &str) -> String {
    words
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map_or(String::new(), |f| {
                f.to_string() + &c.as_str().to_ascii_lowercase()
            })
        })
        .collect()
}

fn status_text(code: i32) -> String {
    let p = ffi::plb_status_str(code);
    assert!(!p.is_null(), "plb_status_str({code}) returned NULL");
    // SAFETY: non-NULL, and documented as static NUL-terminated text.
    let text = unsafe { CStr::from_ptr(p) }
        .to_str()
        .expect("status text is UTF-8");
    assert!(!text.is_empty(), "plb_status_str({code}) is empty");
    text.to_string()
}

#[test]
fn versions_agree() {
    // SAFETY: plb_version returns static NUL-terminated text.
    let version = unsafe { CStr::from_ptr(ffi::plb_version()) };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    assert_eq!(ffi::plb_abi_version(), ffi::PLB_ABI_VERSION);
    let header = defines(GENERATED);
    let abi = header.iter().find(|(n, _)| n == "PLB_ABI_VERSION");
    assert_eq!(
        abi.map(|(_, v)| *v),
        Some(ffi::plb_abi_version() as i64),
        "PLB_ABI_VERSION in the header"
    );
}

#[test]
fn status_codes_match_the_library() {
    let codes: Vec<(String, i64)> = defines(GENERATED)
        .into_iter()
        .filter(|(n, _)| n == "PLB_OK" || n.starts_with("PLB_ERR_"))
        .collect();
    assert!(
        codes.len() > 10,
        "too few status codes in the header: {codes:?}"
    );
    let mut texts: Vec<(i64, String)> = Vec::new();
    for (name, value) in &codes {
        let code = i32::try_from(*value).expect("status codes fit in int32_t");
        let status = Status::from_code(code)
            .unwrap_or_else(|| panic!("{name} = {code} is not a polylb::Status"));
        assert_eq!(status.code(), code, "{name}");
        let expected = if name == "PLB_OK" {
            "Ok".to_string()
        } else {
            camel(&name["PLB_ERR_".len()..])
        };
        assert_eq!(
            format!("{status:?}"),
            expected,
            "{name} = {code} names another status"
        );
        // Hot calls return negated codes; both forms read the same.
        assert_eq!(Status::from_code(-code), Some(status), "-{name}");
        let text = status_text(code);
        assert_eq!(status_text(-code), text, "plb_status_str(-{name})");
        if let Some((other, _)) = texts.iter().find(|(_, t)| *t == text) {
            panic!("{name} and code {other} share the text {text:?}");
        }
        texts.push((*value, text));
    }
    // Every code the library can return has a constant in the header, numbered densely.
    let max = codes.iter().map(|(_, v)| *v).max().unwrap();
    assert_eq!(
        codes.len() as i64,
        max + 1,
        "status codes are 0..={max} without gaps"
    );
    assert_eq!(Status::from_code(max as i32 + 1), None);
    for unknown in [
        max as i32 + 1,
        1000,
        -1000,
        i32::MAX,
        i32::MIN,
        i32::MIN + 1,
    ] {
        let text = status_text(unknown);
        assert!(
            texts.iter().all(|(_, t)| *t != text),
            "unknown status {unknown} reads like a known one: {text:?}"
        );
    }
}

#[test]
fn outcome_codes_match_the_library() {
    let outcomes: Vec<(String, i64)> = defines(GENERATED)
        .into_iter()
        .filter(|(n, _)| n.starts_with("PLB_OUTCOME_"))
        .collect();
    assert_eq!(outcomes.len(), 4, "{outcomes:?}");
    for (name, value) in outcomes {
        let outcome = Outcome::from_code(value as i32)
            .unwrap_or_else(|| panic!("{name} = {value} is not a polylb::Outcome"));
        assert_eq!(outcome as i64, value, "{name}");
        assert_eq!(
            format!("{outcome:?}"),
            camel(&name["PLB_OUTCOME_".len()..]),
            "{name}"
        );
    }
    assert_eq!(Outcome::from_code(4), None);
}

/// Compiles `source` with `compiler` and `flags` into an object file; None if the compiler is
/// missing (the caller skips with a notice).
fn compile(compiler: &str, flags: &[&str], file: &str, source: &str) -> Option<()> {
    if Command::new(compiler).arg("--version").output().is_err() {
        println!("NOTICE: {compiler} not found; skipping this check");
        return None;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("header");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(file);
    std::fs::write(&src, source).unwrap();
    let out = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(root().join("include"))
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(dir.join(format!("{file}.o")))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{compiler} {} {file} failed:\n{}{}",
        flags.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

const STRICT: [&str; 4] = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"];

#[test]
fn header_compiles_alone_as_c11() {
    let flags = [&["-std=c11"][..], &STRICT].concat();
    compile("gcc", &flags, "only_header.c", "#include \"polylb.h\"\n");
}

/// C89 too (cbindgen's C++ guards end in `//` comments, which build.rs rewrites): the header
/// asks nothing of C99 but <stdint.h>.
#[test]
fn header_compiles_alone_as_c89() {
    let flags = [&["-std=c89", "-pedantic-errors"][..], &STRICT].concat();
    compile(
        "gcc",
        &flags,
        "only_header_c89.c",
        "#include \"polylb.h\"\n",
    );
}

#[test]
fn header_compiles_alone_as_cpp17() {
    let flags = [&["-std=c++17", "-x", "c++"][..], &STRICT].concat();
    compile("g++", &flags, "only_header.cpp", "#include \"polylb.h\"\n");
}

/// include/polylb.hpp, the C++ layer, compiles alone with every warning an error (also
/// -Wshadow and -Wconversion, which C++ users' builds often turn on), with exceptions and
/// without them (-fno-exceptions: `check()` aborts instead of throwing). Its behaviour is
/// tested by tests/c/test_cpp_api.cpp (tests/c_abi.rs).
#[test]
fn cpp_header_compiles_alone_with_and_without_exceptions() {
    let extra = ["-std=c++17", "-x", "c++", "-Wshadow", "-Wconversion"];
    let uses = "#include \"polylb.hpp\"\n\
                int use(polylb::Balancer &b) {\n\
                  polylb::Call c = b.call(0, \"key\");\n\
                  return c.ok() && c.finish(polylb::Outcome::Success).ok()\n\
                      && b.select_among(0, {}, {1, 2}, {}).ok() ? 0 : (int)c.check();\n\
                }\n";
    let flags = [&extra[..], &STRICT].concat();
    compile("g++", &flags, "only_hpp.cpp", uses);
    let flags = [&extra[..], &["-fno-exceptions"], &STRICT].concat();
    compile("g++", &flags, "only_hpp_no_exceptions.cpp", uses);
}

/// A program whose translation units include polylb.hpp with and without exceptions, and pass
/// polylb objects between them, fails to link: `check()` throws in one and aborts in the other,
/// and the linker would keep one of the two for both (an abort where a caller expects an
/// exception). Built the same way, the units link.
#[test]
fn cpp_units_with_and_without_exceptions_do_not_link_together() {
    let unit = "#include \"polylb.hpp\"\n\
                int first_id(polylb::Balancer &b) { return (int)b.select().check(); }\n";
    let main = "#include \"polylb.hpp\"\n\
                int first_id(polylb::Balancer &b);\n\
                int main() { polylb::Balancer b; return first_id(b); }\n";
    // The C calls the units make, so that they link without the library.
    let stubs = "#include \"polylb.h\"\n\
                 extern \"C\" int64_t plb_select(const plb_balancer *, uint32_t, const uint8_t *,\n\
                                                   size_t, int64_t) { return 0; }\n\
                 extern \"C\" void plb_balancer_free(plb_balancer *) {}\n\
                 extern \"C\" const char *plb_status_str(int32_t) { return \"\"; }\n";
    let cpp = ["-std=c++17", "-x", "c++"];
    let with = [&cpp[..], &STRICT].concat();
    let without = [&cpp[..], &["-fno-exceptions"], &STRICT].concat();
    if compile("g++", &with, "unit_with.cpp", unit).is_none() {
        return;
    }
    compile("g++", &without, "unit_without.cpp", unit);
    compile("g++", &with, "main_with.cpp", main);
    compile("g++", &with, "stubs.cpp", stubs);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("header");
    let link = |objects: &[&str]| {
        Command::new("g++")
            .args(objects.iter().map(|o| dir.join(format!("{o}.o"))))
            .arg("-o")
            .arg(dir.join("linked"))
            .output()
            .unwrap()
    };
    let same = link(&["unit_with.cpp", "main_with.cpp", "stubs.cpp"]);
    assert!(
        same.status.success(),
        "units built alike must link: {}",
        String::from_utf8_lossy(&same.stderr)
    );
    let mixed = link(&["unit_without.cpp", "main_with.cpp", "stubs.cpp"]);
    let stderr = String::from_utf8_lossy(&mixed.stderr);
    assert!(
        !mixed.status.success() && stderr.contains("first_id"),
        "units with and without exceptions linked together: {stderr}"
    );
}

/// The signatures of the C ABI contract (names fixed; additions allowed): assigning
/// each function to a pointer of the contract's type fails to compile on any change.
#[test]
fn header_keeps_the_contract_signatures() {
    let tu = r#"#include "polylb.h"
#include <stddef.h>
int32_t (*const new_)(const uint8_t *, size_t, plb_balancer **, char *, size_t, size_t *) =
    plb_balancer_new;
void (*const free_)(plb_balancer *) = plb_balancer_free;
int32_t (*const update_)(const plb_balancer *, const plb_invoker *, size_t, char *, size_t,
                         size_t *) = plb_balancer_update;
int32_t (*const method_)(const plb_balancer *, const uint8_t *, size_t, uint32_t *) =
    plb_balancer_method;
int32_t (*const stats_)(const plb_balancer *, int64_t, char *, size_t, size_t *) =
    plb_balancer_stats;
int64_t (*const select_)(const plb_balancer *, uint32_t, const uint8_t *, size_t, int64_t) =
    plb_select;
int64_t (*const among_)(const plb_balancer *, uint32_t, const uint8_t *, size_t,
                        const uint64_t *, size_t, const uint64_t *, size_t, int64_t) =
    plb_select_among;
int32_t (*const report_)(const plb_balancer *, uint32_t, uint64_t, int64_t, int32_t, int64_t) =
    plb_report;
const char *(*const status_)(int32_t) = plb_status_str;
const char *(*const version_)(void) = plb_version;
uint32_t (*const abi_)(void) = plb_abi_version;

/* plb_invoker's fields, in the contract's order. */
_Static_assert(offsetof(plb_invoker, id) == 0, "id first");
_Static_assert(offsetof(plb_invoker, address) < offsetof(plb_invoker, address_len), "address");
_Static_assert(offsetof(plb_invoker, address_len) < offsetof(plb_invoker, weight), "weight");
_Static_assert(offsetof(plb_invoker, weight) < offsetof(plb_invoker, start_time_ms), "start");
_Static_assert(offsetof(plb_invoker, start_time_ms) < offsetof(plb_invoker, warmup_ms), "warm");
_Static_assert(offsetof(plb_invoker, warmup_ms) < offsetof(plb_invoker, zone), "zone");
_Static_assert(offsetof(plb_invoker, zone) < offsetof(plb_invoker, zone_len), "zone_len");
_Static_assert(PLB_OUTCOME_SUCCESS == 0 && PLB_OUTCOME_FAILURE == 1, "outcomes");
_Static_assert(PLB_OUTCOME_TIMEOUT == 2 && PLB_OUTCOME_CANCELLED == 3, "outcomes");
_Static_assert(PLB_OK == 0, "ok");
"#;
    let flags = [&["-std=c11"][..], &STRICT].concat();
    compile("gcc", &flags, "contract.c", tu);
}

/// docs/abi-contract.md's C block, the contract binding authors read, agrees with the header:
/// compiled after `#include "polylb.h"`, each `#define` must be a valid redefinition (the same
/// value) and each declaration a compatible redeclaration (the same types), and its
/// `plb_invoker` (renamed, so it can sit beside the header's) must have the header's fields at
/// the header's offsets and the header's size.
#[test]
fn abi_contract_doc_matches_the_header() {
    let doc = std::fs::read_to_string(root().join("docs/abi-contract.md")).unwrap();
    let start = doc
        .find("```c\n")
        .expect("docs/abi-contract.md has a C block")
        + 5;
    let block = &doc[start..start + doc[start..].find("```").unwrap()];
    let (struct_start, struct_end) = (
        block
            .find("typedef struct plb_invoker {")
            .expect("the block defines plb_invoker"),
        block.find("} plb_invoker;").expect("plb_invoker's end") + "} plb_invoker;".len(),
    );
    let body = &block
        [struct_start + "typedef struct plb_invoker {".len()..struct_end - "} plb_invoker;".len()];
    let fields: Vec<&str> = body
        .split(';')
        .filter_map(|declaration| {
            let name = declaration.trim().rsplit([' ', '*']).next()?;
            (!name.is_empty()).then_some(name)
        })
        .collect();
    assert!(
        fields.len() >= 7,
        "fields of plb_invoker in the doc: {fields:?}"
    );
    let mut checks = String::new();
    for field in &fields {
        checks += &format!(
            "_Static_assert(offsetof(struct doc_invoker, {field}) == offsetof(plb_invoker, {field}) \
             && sizeof(((struct doc_invoker *)0)->{field}) == sizeof(((plb_invoker *)0)->{field}), \
             \"{field}\");\n"
        );
    }
    let tu = format!(
        "#include \"polylb.h\"\n#include <stddef.h>\n{}struct doc_invoker {{{body}}};\n{}\n\
         _Static_assert(sizeof(struct doc_invoker) == sizeof(plb_invoker), \"size\");\n{checks}",
        &block[..struct_start],
        &block[struct_end..],
    );
    let flags = [&["-std=c11"][..], &STRICT].concat();
    compile("gcc", &flags, "abi_contract_doc.c", &tu);
}
