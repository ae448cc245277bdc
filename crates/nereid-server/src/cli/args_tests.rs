//! The flags as tritonserver users write them, parsed.

use super::*;

#[test]
fn tritonserver_flags_parse() {
    let args = Args::try_parse_from([
        "nereid",
        "--model-repository=/a",
        "--model-repository",
        "/b",
        "--http-port=9000",
        "--allow-grpc=false",
        "--strict-model-config",
        "true",
    ])
    .unwrap();
    assert_eq!(args.model_repository.len(), 2);
    assert_eq!(args.http_port, 9000);
    assert!(!args.allow_grpc);
    assert!(args.strict_model_config);
    assert_eq!(args.strict_readiness, Readiness::Strict);
}

#[test]
fn strict_readiness_takes_triton_booleans_and_startup() {
    let parse = |value: &str| {
        Args::try_parse_from([
            "nereid",
            "--model-repository=/a",
            &format!("--strict-readiness={value}"),
        ])
        .map(|a| a.strict_readiness)
    };
    assert_eq!(parse("false").unwrap(), Readiness::Started);
    assert_eq!(parse("0").unwrap(), Readiness::Started);
    assert_eq!(parse("TRUE").unwrap(), Readiness::Strict);
    assert_eq!(parse("startup").unwrap(), Readiness::Startup);
    let err = parse("sometimes").unwrap_err().to_string();
    assert!(err.contains("true, false or startup"), "{err}");
}

#[test]
fn model_control_flags() {
    let args = Args::try_parse_from([
        "nereid",
        "--model-repository=/a",
        "--model-control-mode=EXPLICIT",
        "--load-model=a",
        "--load-model",
        "*",
        "--exit-on-error=false",
    ])
    .unwrap();
    assert_eq!(args.model_control_mode, ModelControlMode::Explicit);
    assert_eq!(args.load_model, ["a", "*"]);
    assert!(!args.exit_on_error);
    let defaults = Args::try_parse_from(["nereid", "--model-repository=/a"]).unwrap();
    assert_eq!(defaults.model_control_mode, ModelControlMode::None);
    assert_eq!(defaults.repository_poll_secs, 15);
    assert!(defaults.exit_on_error);
    assert!(
        Args::try_parse_from(["nereid", "--model-repository=/a", "--model-control-mode=x"])
            .is_err()
    );
}

#[test]
fn load_model_needs_explicit_mode() {
    let dir = tempfile::tempdir().unwrap();
    let repo = format!("--model-repository={}", dir.path().display());
    for mode in ["none", "poll"] {
        let args = Args::try_parse_from([
            "nereid",
            &repo,
            &format!("--model-control-mode={mode}"),
            "--load-model=a",
        ])
        .unwrap();
        let err = args.into_config().unwrap_err();
        assert!(
            err.to_string()
                .contains("requires setting '--model-control-mode=explicit'")
        );
    }
}

#[test]
fn metrics_interval_must_be_positive() {
    assert!(
        Args::try_parse_from(["nereid", "--model-repository=/a", "--metrics-interval-ms=0"])
            .is_err()
    );
}

#[test]
fn log_flags() {
    let args = Args::try_parse_from([
        "nereid",
        "--model-repository=/a",
        "--log-info=false",
        "--log-warning",
        "0",
        "--log-verbose=2",
        "--log-format=ISO8601",
        "--log-file=/tmp/n.log",
    ])
    .unwrap();
    let s = args.log_settings();
    assert!(!s.log_info && !s.log_warning && s.log_error);
    assert_eq!(s.log_verbose_level, 2);
    assert_eq!(s.log_format, LogFormat::Iso8601);
    assert_eq!(s.log_file, "/tmp/n.log");
    let defaults = Args::try_parse_from(["nereid", "--model-repository=/a"]).unwrap();
    assert_eq!(defaults.log_settings(), LogSettings::default());
    assert!(
        Args::try_parse_from(["nereid", "--model-repository=/a", "--log-format=iso8601"]).is_err()
    );
}

#[test]
fn kserve_tritonserver_arguments_parse() {
    // KServe's Triton runtime (deploy/kserve), and the mode it adds
    // when an InferenceService has no storageUri.
    let args = Args::try_parse_from([
        "tritonserver",
        "--model-store=/mnt/models",
        "--grpc-port=9000",
        "--http-port=8080",
        "--allow-grpc=true",
        "--allow-http=true",
        "--model-control-mode=explicit",
    ])
    .unwrap();
    assert_eq!(
        (args.http_port, args.grpc_port, args.metrics_port),
        (8080, 9000, 8002)
    );
    assert!(args.allow_http && args.allow_grpc);
    assert_eq!(args.model_control_mode, ModelControlMode::Explicit);
}

#[test]
fn a_kafka_route_file_is_read_and_checked_before_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let repo = format!("--model-repository={}", dir.path().display());
    let config = |path: &std::path::Path| {
        Args::try_parse_from([
            "nereid",
            &repo,
            &format!("--kafka-config={}", path.display()),
        ])
        .unwrap()
        .into_config()
    };
    let missing = config(&dir.path().join("none.toml")).unwrap_err();
    assert!(
        missing.to_string().contains("cannot read the Kafka config"),
        "{missing}"
    );
    let file = dir.path().join("kafka.toml");
    std::fs::write(&file, "brokers = \"b:1\"\ngroup_id = \"g\"\n").unwrap();
    let empty = config(&file).unwrap_err();
    assert!(empty.to_string().contains("no [[routes]]"), "{empty}");
    let route = "[[routes]]\ninput_topic = \"i\"\nmodel = \"m\"\noutput_topic = \"o\"\ndead_letter_topic = \"d\"\n";
    std::fs::write(
        &file,
        format!("brokers = \"b:1\"\ngroup_id = \"g\"\n{route}"),
    )
    .unwrap();
    let kafka = config(&file).unwrap().kafka.unwrap();
    assert_eq!(kafka.routes[0].model, "m");
    let args = Args::try_parse_from(["nereid", &repo]).unwrap();
    assert!(args.into_config().unwrap().kafka.is_none());
}

#[test]
fn unknown_flags_are_named() {
    let err = Args::try_parse_from(["nereid", "--model-repository=/a", "--backend-directory=/x"])
        .unwrap_err();
    assert!(err.to_string().contains("--backend-directory"), "{err}");
}
