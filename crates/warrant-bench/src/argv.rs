//! The reference tool's single-dash long flags (`-scenario aic`).

use std::ffi::OsString;

/// Rewrites reference-style single-dash long flags (`-scenario aic`,
/// `-duration=20s`) to clap's `--scenario`, for the `bench` subcommand only:
/// other subcommands keep clap's normal parsing. `-v` and `-h` stay short.
/// Takes the whole argv of the binary (`warrant bench …`).
pub fn normalize_argv(args: Vec<OsString>) -> Vec<OsString> {
    let is_bench = args.get(1).and_then(|a| a.to_str()) == Some("bench");
    if !is_bench {
        return args;
    }
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            if i < 2 {
                return a;
            }
            match a.to_str() {
                Some(s) if is_single_dash_long(s) => OsString::from(format!("-{s}")),
                _ => a,
            }
        })
        .collect()
}

fn is_single_dash_long(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return false;
    };
    let name = rest.split('=').next().unwrap_or("");
    name.len() >= 2
        && !rest.starts_with('-')
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn single_dash_long_flags_become_double_dash_for_bench_only() {
        let got = normalize_argv(os(&[
            "warrant",
            "bench",
            "-scenario",
            "aic",
            "-duration=20s",
            "-v",
            "--agents",
            "5",
        ]));
        assert_eq!(
            got,
            os(&[
                "warrant",
                "bench",
                "--scenario",
                "aic",
                "--duration=20s",
                "-v",
                "--agents",
                "5"
            ])
        );
        let other = os(&["warrant", "serve", "-data-dir", "x"]);
        assert_eq!(normalize_argv(other.clone()), other);
    }

    #[test]
    fn negative_numbers_and_short_flags_are_left_alone() {
        assert!(!is_single_dash_long("-5"));
        assert!(!is_single_dash_long("-v"));
        assert!(!is_single_dash_long("--agents"));
        assert!(is_single_dash_long("-server-process"));
    }
}
