//! The C ABI from C and C++. Builds every program in tests/c (C11 `.c`, and C++17 `.cpp` using
//! include/polylb.hpp) against the library of this build and runs it under AddressSanitizer +
//! UndefinedBehaviorSanitizer (linked with libpolylb.a, and again with libpolylb.so), runs the
//! single-threaded ones under valgrind memcheck, and builds, runs and installs the example in
//! examples/c (its Makefile and pkg-config file).
//!
//! Needs gcc and g++ (and make, valgrind, pkg-config for the parts that use them); a missing
//! tool skips its part with a printed NOTICE. Run with `cargo test --release --test c_abi`.

mod common;
use common::built::{cargo_build_lib, profile_dir, root};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A C program that runs longer than this is reported as hung.
const TIMEOUT: Duration = Duration::from_secs(180);

const CFLAGS: &[&str] = &[
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wpedantic",
    "-Werror",
    "-g",
    "-O1",
    "-pthread",
];

const SANITIZE: &[&str] = &[
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
];

/// For the program that forks while its other threads allocate: GCC 12's ASan does not hold its
/// allocator's locks across fork(), so now and then a child hung in ASan's malloc (1 of 180 in
/// a CI run), which says nothing of the library's locks, the program's subject.
const SANITIZE_FORKING_THREADS: &[&str] = &[
    "-fsanitize=undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
];

/// Where this test writes its executables.
fn work_dir(sub: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("c_abi")
        .join(sub);
    std::fs::create_dir_all(&dir).expect("create the work directory");
    dir
}

struct Library {
    dir: PathBuf,
    shared: PathBuf,
    archive: PathBuf,
}

/// The cdylib and staticlib of this build. `cargo test` compiles them into
/// target/<profile>/deps (only `cargo build` copies them up to target/<profile>), so take them
/// from there. Running `cargo build --lib` from here instead would resolve features without
/// the dev-dependencies, recompile the crate, and make the next `cargo test` recompile it
/// again; it is only the fallback when neither place has both files.
fn library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| {
        let profile = profile_dir();
        let found = |dir: &Path| {
            let lib = Library {
                shared: dir.join("libpolylb.so"),
                archive: dir.join("libpolylb.a"),
                dir: dir.to_path_buf(),
            };
            (lib.shared.is_file() && lib.archive.is_file()).then_some(lib)
        };
        if let Some(lib) = found(&profile.join("deps")).or_else(|| found(&profile)) {
            return lib;
        }
        cargo_build_lib(&profile);
        found(&profile)
            .unwrap_or_else(|| panic!("no libpolylb.so and libpolylb.a in {}", profile.display()))
    })
}

/// The system libraries libpolylb.a needs, from examples/c/Makefile (so linking here also
/// checks the list documented there).
fn native_static_libs() -> Vec<String> {
    let makefile =
        std::fs::read_to_string(root().join("examples/c/Makefile")).expect("examples/c/Makefile");
    let line = makefile
        .lines()
        .find_map(|l| l.strip_prefix("NATIVE_STATIC_LIBS ?="))
        .expect("NATIVE_STATIC_LIBS in examples/c/Makefile");
    line.split_whitespace().map(str::to_string).collect()
}

fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        println!("NOTICE: `{tool}` is not on PATH: skipping what needs it");
    }
    found
}

#[derive(Clone, Copy, Debug)]
enum Link {
    Static,
    Shared,
}

fn link_args(lib: &Library, link: Link) -> Vec<OsString> {
    match link {
        Link::Static => std::iter::once(lib.archive.clone().into_os_string())
            .chain(native_static_libs().into_iter().map(OsString::from))
            .collect(),
        Link::Shared => vec![
            format!("-L{}", lib.dir.display()).into(),
            "-lpolylb".into(),
            format!("-Wl,-rpath,{}", lib.dir.display()).into(),
        ],
    }
}

/// The test programs: tests/c/*.c and *.cpp, each a complete program; the C++ ones only when
/// g++ is there.
fn programs() -> Vec<PathBuf> {
    let cpp = have("g++");
    let mut found: Vec<PathBuf> = std::fs::read_dir(root().join("tests/c"))
        .expect("tests/c")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "c" || (cpp && x == "cpp"))
        })
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no C programs in tests/c");
    found
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Runs a command to completion (killing it after TIMEOUT); returns its combined output, or
/// an error describing how it failed.
fn run(mut cmd: Command, what: &str) -> Result<String, String> {
    let start = Instant::now();
    // cargo's LD_LIBRARY_PATH names target/<profile> before the rpath each program was linked
    // with: a program linked against deps/libpolylb.so would load the copy `cargo build` left
    // there, which `cargo test` alone does not refresh.
    cmd.env_remove("LD_LIBRARY_PATH");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    // Drain both pipes while waiting, so a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("{what}: {e}"))? {
            break Some(status);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = format!(
        "{}{}",
        out_reader.join().unwrap_or_default(),
        err_reader.join().unwrap_or_default()
    );
    match status {
        Some(s) if s.success() => Ok(output),
        Some(s) => Err(format!("{what}: {s}\n{output}")),
        None => Err(format!(
            "{what}: still running after {TIMEOUT:?}, killed\n{output}"
        )),
    }
}

/// Compiles one program: C11 with gcc, or C++17 with g++ for a `.cpp`.
fn compile(src: &Path, exe: &Path, extra: &[&str], link: Vec<OsString>) -> Result<(), String> {
    let cpp = src.extension().is_some_and(|x| x == "cpp");
    let mut cmd = Command::new(if cpp { "g++" } else { "gcc" });
    cmd.args(CFLAGS.iter().map(|&f| {
        if cpp && f == "-std=c11" {
            "-std=c++17"
        } else {
            f
        }
    }))
    .args(extra)
    .arg("-I")
    .arg(root().join("include"))
    .arg("-I")
    .arg(root().join("tests/c"))
    .arg(src)
    .args(link)
    .arg("-o")
    .arg(exe);
    run(cmd, &format!("compiling {}", src.display())).map(|_| ())
}

/// Runs `jobs` on up to two threads (the suite's budget is two cores); collects failures.
fn in_parallel<T: Sync>(jobs: &[T], job: impl Fn(&T) -> Result<String, String> + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(j) = jobs.get(i) else { break };
                match job(j) {
                    Ok(summary) => println!("{summary}"),
                    Err(e) => failures.lock().unwrap().push(e),
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} C program(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn c_programs_pass_under_asan_and_ubsan() {
    if !have("gcc") {
        return;
    }
    let lib = library();
    let dir = work_dir("asan");
    let jobs: Vec<(PathBuf, Link)> = programs()
        .into_iter()
        .flat_map(|p| [(p.clone(), Link::Static), (p, Link::Shared)])
        .collect();
    in_parallel(&jobs, |(src, link)| {
        let name = format!("{}-{link:?}", stem(src)).to_lowercase();
        let exe = dir.join(&name);
        let flags = if stem(src) == "test_fork_threads" {
            SANITIZE_FORKING_THREADS
        } else {
            SANITIZE
        };
        compile(src, &exe, flags, link_args(lib, *link))?;
        let sanitized = |detect_leaks: bool| {
            let mut cmd = Command::new(&exe);
            cmd.env(
                "ASAN_OPTIONS",
                format!("detect_leaks={}:halt_on_error=1", detect_leaks as u8),
            )
            .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1");
            run(cmd, &format!("{name} (ASan+UBSan)"))
        };
        let output = match sanitized(true) {
            // LeakSanitizer needs ptrace, which some containers forbid; valgrind checks leaks.
            Err(e) if e.contains("LeakSanitizer has encountered a fatal error") => {
                println!("NOTICE: LeakSanitizer cannot run here; {name} runs without it");
                sanitized(false)?
            }
            other => other?,
        };
        Ok(format!("{name}: passed\n{output}"))
    });
}

#[test]
fn c_programs_are_clean_under_valgrind() {
    if !have("gcc") || !have("valgrind") {
        return;
    }
    let lib = library();
    let dir = work_dir("valgrind");
    // The threaded tests take ~35 s under valgrind; ASan already covers them.
    let jobs: Vec<PathBuf> = programs()
        .into_iter()
        .filter(|p| stem(p) != "test_threads" && stem(p) != "test_fork_threads")
        .collect();
    in_parallel(&jobs, |src| {
        let name = stem(src);
        let exe = dir.join(&name);
        compile(src, &exe, &[], link_args(lib, Link::Shared))?;
        let mut cmd = Command::new("valgrind");
        // Exit code 99 tells memcheck errors and leaks apart from the program's own failed
        // checks (exit 1). Rust std's "still reachable" blocks are not errors.
        cmd.args([
            "-q",
            "--leak-check=full",
            "--error-exitcode=99",
            "--errors-for-leak-kinds=definite,indirect",
        ])
        .arg(&exe);
        let output = run(cmd, &format!("{name} under valgrind memcheck"))?;
        Ok(format!("{name}: clean under valgrind\n{output}"))
    });
}

/// The SONAME is the full version before 1.0 (no ABI promise): a client linked against one
/// release must not start with another. A client linked from the build directory finds the
/// library under that name there, as it would in an installed library directory.
#[test]
fn the_shared_library_is_named_by_its_full_version() {
    if !have("gcc") || !have("readelf") {
        return;
    }
    let lib = library();
    let versioned = format!("libpolylb.so.{}", env!("CARGO_PKG_VERSION"));
    let mut cmd = Command::new("readelf");
    cmd.arg("-d").arg(&lib.shared);
    let dynamic = run(cmd, "readelf -d libpolylb.so").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        dynamic.contains(&format!("Library soname: [{versioned}]")),
        "{dynamic}"
    );
    assert_eq!(
        std::fs::canonicalize(lib.dir.join(&versioned)).ok(),
        std::fs::canonicalize(&lib.shared).ok(),
        "{versioned} beside {} must be the library",
        lib.shared.display()
    );
    let exe = work_dir("soname").join("client");
    let client = root().join("examples/c/client.c");
    compile(&client, &exe, &[], link_args(lib, Link::Shared)).unwrap_or_else(|e| panic!("{e}"));
    let deps = ldd(&exe);
    assert!(
        deps.is_empty()
            || deps.contains(&format!(
                "{versioned} => {}",
                lib.dir.join(&versioned).display()
            )),
        "{deps}"
    );
    let out = run(Command::new(&exe), "client linked by SONAME").unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("call 0 -> provider"), "{out}");
}

fn make(args: &[&str], lib: &Library, build: &Path) -> Result<String, String> {
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(root().join("examples/c"))
        .args(args)
        .arg(format!("LIBDIR={}", lib.dir.display()))
        .arg(format!("BUILD={}", build.display()));
    run(cmd, &format!("make {}", args.join(" ")))
}

#[test]
fn example_builds_runs_installs_and_links_through_pkg_config() {
    if !have("gcc") || !have("make") {
        return;
    }
    let lib = library();
    let work = work_dir("example");
    let build = work.join("build");
    let cpp = have("g++");
    for link in ["LINK=shared", "LINK=static"] {
        if cpp {
            make(&["bench-cpp", link], lib, &build).unwrap_or_else(|e| panic!("{e}"));
        }
        let runs: &[&str] = if cpp { &["run", "run-cpp"] } else { &["run"] };
        for target in runs {
            let out = make(&[target, link], lib, &build).unwrap_or_else(|e| panic!("{e}"));
            assert!(out.contains("call 0 -> provider"), "{target} {link}: {out}");
            assert!(
                out.contains("\"strategy\":\"leastactive\""),
                "{target} {link}: {out}"
            );
        }
    }

    let prefix = work.join("prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    let prefix_arg = format!("PREFIX={}", prefix.display());
    make(&["install", &prefix_arg], lib, &build).unwrap_or_else(|e| panic!("{e}"));
    let versioned = format!("libpolylb.so.{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        std::fs::read_link(prefix.join("lib/libpolylb.so")).ok(),
        Some(PathBuf::from(&versioned)),
        "make install: lib/libpolylb.so must link to {versioned}, the SONAME"
    );
    for file in [
        &format!("lib/{versioned}"),
        "lib/libpolylb.so",
        "lib/libpolylb.a",
        "include/polylb.h",
        "include/polylb.hpp",
        "lib/pkgconfig/polylb.pc",
    ] {
        assert!(
            prefix.join(file).is_file(),
            "make install did not install {file}"
        );
    }
    for header in ["include/polylb.h", "include/polylb.hpp"] {
        assert_eq!(
            std::fs::read(prefix.join(header)).unwrap(),
            std::fs::read(root().join(header)).unwrap(),
            "installed {header}"
        );
    }

    if !have("pkg-config") {
        return;
    }
    let pkg_config = |args: &[&str]| -> String {
        let mut cmd = Command::new("pkg-config");
        cmd.env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .args(args)
            .arg("polylb");
        run(cmd, &format!("pkg-config {}", args.join(" ")))
            .unwrap_or_else(|e| panic!("{e}"))
            .trim()
            .to_string()
    };
    assert_eq!(pkg_config(&["--modversion"]), env!("CARGO_PKG_VERSION"));
    let cflags = pkg_config(&["--cflags"]);
    assert_eq!(cflags, format!("-I{}", prefix.join("include").display()));
    let libs = pkg_config(&["--libs"]);
    let static_libs = pkg_config(&["--static", "--libs"]);
    let native = native_static_libs();
    assert!(
        native.iter().all(|l| static_libs.contains(l.as_str())),
        "{static_libs}"
    );

    // Shared: the flags pkg-config gives, plus where to find the library at run time; the
    // C++ client too, whose polylb.hpp the same -I finds.
    let mut flags: Vec<OsString> = cflags
        .split_whitespace()
        .chain(libs.split_whitespace())
        .map(OsString::from)
        .collect();
    flags.push(format!("-Wl,-rpath,{}", prefix.join("lib").display()).into());
    let sources: &[&str] = if cpp {
        &["client.c", "client.cpp"]
    } else {
        &["client.c"]
    };
    for source in sources {
        let exe = work.join(format!("{source}-pkg-config-shared"));
        compile(
            &root().join("examples/c").join(source),
            &exe,
            &[],
            flags.clone(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let out = run(
            Command::new(&exe),
            &format!("{source} linked through pkg-config (shared)"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("call 0 -> provider"), "{out}");
        let deps = ldd(&exe);
        let installed = format!(
            "{versioned} => {}",
            prefix.join("lib").join(&versioned).display()
        );
        assert!(deps.is_empty() || deps.contains(&installed), "{deps}");
    }
    let client = root().join("examples/c/client.c");

    // Static: the archive by path (-lpolylb would pick the .so) plus native_static_libs.
    let exe = work.join("client-pkg-config-static");
    let libdir = pkg_config(&["--variable=libdir"]);
    let mut flags: Vec<OsString> = cflags.split_whitespace().map(OsString::from).collect();
    flags.push(Path::new(&libdir).join("libpolylb.a").into_os_string());
    flags.extend(
        pkg_config(&["--variable=native_static_libs"])
            .split_whitespace()
            .map(OsString::from),
    );
    compile(&client, &exe, &[], flags).unwrap_or_else(|e| panic!("{e}"));
    let out = run(
        Command::new(&exe),
        "client linked through pkg-config (static)",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("call 0 -> provider"), "{out}");
    assert!(
        !ldd(&exe).contains("libpolylb"),
        "the static client needs libpolylb.so"
    );
}

/// What `ldd` says about an executable ("" if ldd is unavailable).
fn ldd(exe: &Path) -> String {
    let mut cmd = Command::new("ldd");
    cmd.arg(exe);
    run(cmd, "ldd").unwrap_or_default()
}

/// Under C++11 or C++14 the C++ header says what it needs, instead of failing deep inside on
/// an inline variable or `std::string_view`; C++17 takes it.
#[test]
fn cpp_header_names_the_standard_it_needs() {
    if !have("g++") {
        return;
    }
    let dir = work_dir("cpp-standard");
    let src = dir.join("include_only.cpp");
    std::fs::write(&src, "#include <polylb.hpp>\nint main() { return 0; }\n").unwrap();
    for (standard, accepted) in [
        ("-std=c++11", false),
        ("-std=c++14", false),
        ("-std=c++17", true),
    ] {
        let mut cmd = Command::new("g++");
        cmd.arg(standard)
            .arg("-fsyntax-only")
            .arg("-I")
            .arg(root().join("include"))
            .arg(&src);
        match run(cmd, standard) {
            Ok(_) => assert!(accepted, "{standard}: polylb.hpp compiled"),
            Err(e) => {
                assert!(!accepted, "{e}");
                assert!(e.contains("polylb.hpp needs C++17 or later"), "{e}");
                assert_eq!(
                    e.matches(": error:").count(),
                    1,
                    "{standard}: one error, the first:\n{e}"
                );
            }
        }
    }
}

/// The C++ snippet of examples/c/README.md compiles as written (inside a `main`) and runs.
#[test]
fn cpp_snippet_of_the_c_readme_runs() {
    if !have("g++") {
        return;
    }
    let readme = std::fs::read_to_string(root().join("examples/c/README.md")).unwrap();
    let start = readme
        .find("```cpp\n")
        .expect("examples/c/README.md has a C++ block")
        + "```cpp\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    let dir = work_dir("readme-cpp");
    let src = dir.join("snippet.cpp");
    std::fs::write(
        &src,
        format!("#include <polylb.hpp>\n#include <cstdint>\nint main() {{\n{block}return id == 0;\n}}\n"),
    )
    .unwrap();
    let exe = dir.join("snippet");
    compile(&src, &exe, &[], link_args(library(), Link::Shared)).unwrap_or_else(|e| panic!("{e}"));
    run(Command::new(&exe), "the README's C++ snippet").unwrap_or_else(|e| panic!("{e}"));
}
