//! What an install puts beside the binary: shell completions and man pages, checked by the
//! shells and the man reader that use them.

use super::qrelgen;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// Feeds `input` to `program args` and returns its exit status and stderr, or `None` when the
/// program is not installed.
fn feed(program: &str, args: &[&str], input: &[u8]) -> Option<(bool, String)> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(input).ok()?;
    let output = child.wait_with_output().ok()?;
    Some((output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned()))
}

#[test]
fn the_bash_completion_script_is_valid_bash_and_completes_subcommands() {
    let script = qrelgen(&["completions", "bash"]);
    assert!(script.status.success());
    let (ok, stderr) =
        feed("bash", &["-n"], &script.stdout).unwrap_or_else(|| panic!("bash is not installed"));
    assert!(ok, "bash -n: {stderr}");
    // Source it and ask what `qrelgen re` completes to.
    let probe = [
        script.stdout.as_slice(),
        b"\nCOMP_WORDS=(qrelgen re); COMP_CWORD=1; _qrelgen qrelgen re qrelgen; printf '%s\\n' \"${COMPREPLY[@]}\"\n",
    ]
    .concat();
    let output = Command::new("bash")
        .arg("-c")
        .arg(String::from_utf8_lossy(&probe).into_owned())
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let words = String::from_utf8_lossy(&output.stdout);
    let mut words: Vec<&str> = words.lines().collect();
    words.sort_unstable();
    assert_eq!(words, ["refresh", "review"], "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn man_pages_render_in_man() {
    let page = qrelgen(&["man", "build"]);
    assert!(page.status.success());
    let dir = super::tempdir();
    let file = dir.path().join("qrelgen-build.1");
    fs_err::write(&file, &page.stdout).unwrap_or_else(|e| panic!("{e}"));
    let output = Command::new("man").args(["-l", "-P", "cat"]).arg(&file).env("MANWIDTH", "80").output();
    let Ok(output) = output else {
        eprintln!("SKIPPED: man is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.starts_with("qrelgen-build(1)"), "{text}");
    assert!(text.contains("--corpus <PATH>") && text.contains("--gate"), "{text}");
    let unknown = qrelgen(&["man", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("hint: one of build, review"));
}
