//! Tests of `consumers/src/delivery/oci/build.rs`.

use super::*;
use crate::delivery::blob::sha256_hex;

fn context(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut writer = TarWriter::new();
    for (path, data, mode) in files {
        writer.file(path, *mode, 0, 0, data).unwrap();
    }
    writer.finish().unwrap()
}

fn build(files: &[(&str, &[u8], u32)], args: &[(&str, &str)]) -> Result<OciImage, BuildError> {
    let args: BTreeMap<String, String> = args.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    let platform = Platform::parse("linux/arm64/v8").unwrap();
    build_image(
        &context(files),
        &BuildInput {
            dockerfile: "Dockerfile",
            build_args: &args,
            platform: &platform,
        },
    )
}

fn layer_paths(blob: &OciBlob) -> Vec<(String, u32)> {
    tar::read_archive(&blob.bytes)
        .unwrap()
        .into_iter()
        .map(|e| (e.path, e.mode))
        .collect()
}

#[test]
fn a_scratch_image_has_its_config_and_layers() {
    let dockerfile = br#"
ARG VERSION=0.0.0
FROM scratch AS final
ARG VERSION
ARG CHANNEL=stable
ENV APP_HOME=/app \
GREETING="hello world"
WORKDIR $APP_HOME
LABEL org.opencontainers.image.version=$VERSION channel=${CHANNEL}
COPY bin/ ./bin/
COPY --chmod=600 config.json /etc/app/
EXPOSE 8080 53/udp
USER 1000:1000
ENTRYPOINT ["/app/bin/server"]
CMD --port 8080
"#;
    let image = build(
        &[
            ("Dockerfile", dockerfile, 0o644),
            ("bin/server", b"\x7fELF", 0o755),
            ("bin/lib/helper.so", b"so", 0o644),
            ("config.json", b"{}", 0o644),
            ("notes.txt", b"not copied", 0o644),
        ],
        &[("VERSION", "1.4.0"), ("UNUSED", "x")],
    )
    .unwrap();
    assert_eq!(image.layers.len(), 2);
    assert_eq!(
        layer_paths(&image.layers[0]),
        vec![
            ("app".to_owned(), 0o755),
            ("app/bin".to_owned(), 0o755),
            ("app/bin/lib".to_owned(), 0o755),
            ("app/bin/lib/helper.so".to_owned(), 0o644),
            ("app/bin/server".to_owned(), 0o755),
        ]
    );
    assert_eq!(
        layer_paths(&image.layers[1]),
        vec![
            ("etc".to_owned(), 0o755),
            ("etc/app".to_owned(), 0o755),
            ("etc/app/config.json".to_owned(), 0o600)
        ]
    );
    let config: Value = serde_json::from_slice(&image.config.bytes).unwrap();
    assert_eq!(
        config,
        json!({
            "architecture": "arm64",
            "os": "linux",
            "variant": "v8",
            "config": {
                "User": "1000:1000",
                "ExposedPorts": {"53/udp": {}, "8080/tcp": {}},
                "Env": ["APP_HOME=/app", "GREETING=hello world"],
                "Entrypoint": ["/app/bin/server"],
                "Cmd": ["/bin/sh", "-c", "--port 8080"],
                "WorkingDir": "/app",
                "Labels": {"channel": "stable", "org.opencontainers.image.version": "1.4.0"}
            },
            "rootfs": {"type": "layers", "diff_ids": [image.layers[0].digest, image.layers[1].digest]}
        })
    );
    let manifest: Value = serde_json::from_slice(&image.manifest.bytes).unwrap();
    assert_eq!(manifest["config"]["digest"], image.config.digest);
    assert_eq!(manifest["layers"][1]["size"], image.layers[1].size());
    assert_eq!(
        image.manifest.digest,
        format!("sha256:{}", sha256_hex(&image.manifest.bytes))
    );
}

#[test]
fn the_same_context_gives_the_same_digest() {
    let files: &[(&str, &[u8], u32)] = &[
        ("Dockerfile", b"FROM scratch\nCOPY . /srv/\nCMD [\"/srv/app\"]\n", 0o644),
        ("app", b"binary", 0o755),
        ("data/z.txt", b"z", 0o644),
        ("data/a.txt", b"a", 0o644),
    ];
    let first = build(files, &[]).unwrap();
    let second = build(files, &[]).unwrap();
    assert_eq!(first, second);
    let mut changed = files.to_vec();
    changed[1] = ("app", b"binary2", 0o755);
    assert_ne!(build(&changed, &[]).unwrap().digest(), first.digest());
}

#[test]
fn file_destinations_globs_and_dockerignore() {
    let image = build(
        &[
            (
                "Dockerfile",
                b"FROM scratch\nCOPY app.bin /usr/bin/app\nCOPY [\"*.txt\", \"/docs/\"]\nCOPY out /out\n",
                0o644,
            ),
            (".dockerignore", b"out/*.tmp\nsecret.txt\n", 0o644),
            ("app.bin", b"x", 0o755),
            ("a.txt", b"a", 0o644),
            ("b.txt", b"b", 0o644),
            ("secret.txt", b"s", 0o644),
            ("out/result", b"r", 0o644),
            ("out/scratch.tmp", b"t", 0o644),
        ],
        &[],
    )
    .unwrap();
    let paths = |i: usize| -> Vec<String> { layer_paths(&image.layers[i]).into_iter().map(|(p, _)| p).collect() };
    assert_eq!(paths(0), vec!["usr", "usr/bin", "usr/bin/app"]);
    assert_eq!(paths(1), vec!["docs", "docs/a.txt", "docs/b.txt"]);
    assert_eq!(paths(2), vec!["out", "out/result"]);
}

#[test]
fn add_unpacks_a_plain_tar() {
    let inner = context(&[("lib/x.so", b"x", 0o644)]);
    let image = build(
        &[
            ("Dockerfile", b"FROM scratch\nADD vendor.tar /opt/\n", 0o644),
            ("vendor.tar", &inner, 0o644),
        ],
        &[],
    )
    .unwrap();
    let paths: Vec<String> = layer_paths(&image.layers[0]).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, vec!["opt", "opt/lib", "opt/lib/x.so"]);
}

#[test]
fn archive_and_syntax_errors_keep_their_cause() {
    let mut damaged = context(&[("lib/x.so", b"x", 0o644)]);
    damaged[148..156].copy_from_slice(b"0000000\0"); // the header checksum
    let err = build(
        &[
            ("Dockerfile", b"FROM scratch\nADD vendor.tar /opt/\n", 0o644),
            ("vendor.tar", &damaged, 0o644),
        ],
        &[],
    )
    .unwrap_err();
    match &err {
        BuildError::Archive { line, context, .. } => {
            assert_eq!(*line, 2);
            assert_eq!(context, "`vendor.tar`");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("Dockerfile line 2 (`ADD vendor.tar /opt/`): `vendor.tar`: "),
        "{err}"
    );
    let source = std::error::Error::source(&err).expect("the tar error is kept");
    assert!(source.downcast_ref::<tar::TarError>().is_some());

    let platform = Platform::parse("linux/amd64").unwrap();
    let input = BuildInput {
        dockerfile: "Dockerfile",
        build_args: &BTreeMap::new(),
        platform: &platform,
    };
    let err = build_image(b"not a tar at all", &input).unwrap_err();
    assert!(matches!(err, BuildError::ContextArchive(_)), "{err}");
    assert!(std::error::Error::source(&err).is_some(), "the tar error is kept");

    let err = build(&[("Dockerfile", b"FROM scratch\n2COPY a /a\n", 0o644)], &[]).unwrap_err();
    assert!(matches!(&err, BuildError::Syntax(syntax) if syntax.line == 2), "{err}");
    assert_eq!(err.to_string(), "Dockerfile line 2: `2COPY` is not an instruction");
}

#[test]
fn unsupported_instructions_name_their_line() {
    let err = build(
        &[(
            "Dockerfile",
            b"# base\nFROM mcr.microsoft.com/dotnet/aspnet:9.0\nCOPY . /app\n",
            0o644,
        )],
        &[],
    )
    .unwrap_err();
    match &err {
        BuildError::Instruction { line, reason, .. } => {
            assert_eq!(*line, 2);
            assert!(reason.contains("mcr.microsoft.com/dotnet/aspnet:9.0"), "{reason}");
            assert!(reason.contains("no registry access"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let base_from_arg = build(
        &[("Dockerfile", b"ARG BASE=alpine\nFROM $BASE\n", 0o644)],
        &[("BASE", "debian:12")],
    )
    .unwrap_err();
    assert!(base_from_arg.to_string().contains("debian:12"), "{base_from_arg}");

    for (dockerfile, needle) in [
        ("FROM scratch\nRUN make\n", "line 2"),
        ("FROM scratch\nCOPY missing /x\n", "not in the build context"),
        ("FROM scratch\nCOPY --from=build /a /b\n", "multi-stage"),
        ("FROM scratch\nCOPY ../etc/passwd /x\n", "outside the context"),
        ("FROM scratch\nADD https://example.com/x /x\n", "remote"),
        ("FROM scratch\nFROM scratch\n", "multi-stage"),
        ("COPY a b\n", "before FROM"),
        ("ARG X=1\n", "no FROM"),
        ("FROM scratch\nHEALTHCHECK NONE\n", "not supported"),
    ] {
        let err = build(&[("Dockerfile", dockerfile.as_bytes(), 0o644), ("a", b"a", 0o644)], &[]).unwrap_err();
        assert!(err.to_string().contains(needle), "{dockerfile:?}: {err}");
    }
    let err = build(&[("other", b"x", 0o644)], &[]).unwrap_err();
    assert!(matches!(err, BuildError::Context(_)), "{err}");
}

#[test]
fn a_context_under_one_top_folder_is_found() {
    let image = build(
        &[
            ("ctx/Dockerfile", b"FROM scratch\nCOPY app /app\n", 0o644),
            ("ctx/app", b"x", 0o755),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(layer_paths(&image.layers[0]), vec![("app".to_owned(), 0o755)]);
}

#[test]
fn paths_join_and_clean() {
    assert_eq!(join_path("/app", "bin"), "/app/bin");
    assert_eq!(join_path("/app", "/etc/../opt/"), "/opt");
    assert_eq!(join_path("/", "../.."), "/");
    assert_eq!(clean_relative("./src/../bin/"), Some("bin".to_owned()));
    assert_eq!(clean_relative("../x"), None);
    assert_eq!(Platform::parse("linux/amd64").unwrap().to_string(), "linux/amd64");
    assert!(Platform::parse("linux").is_err());
}
