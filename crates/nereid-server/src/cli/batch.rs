//! `nereid batch`'s flags: the model, the files, and the engine settings
//! the server takes too (repositories, backends, devices).

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use nereid_batch::{CommitPolicy, Format, InputFiles, Job};
use nereid_core::ModelVersion;
use nereid_engine::{ControlMode, EngineOptions, ModelControl};

use super::devices::DeviceFlags;
use super::repositories::{Repositories, RepositoryArg, open_repositories, parse_repository};
use super::settings::python_path;
use crate::backends::BackendSettings;
use nereid_edge::logging::LogSettings;

/// Run one model over the records of a file and write one result per
/// record, in input order (docs/batch.md). Exit status: 0 when every
/// record succeeded, 2 when some failed, 1 when the job could not run,
/// 130 when interrupted (run it again to resume).
#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// Model repository, as the server takes it; repeat for several.
    #[arg(
        long = "model-repository",
        alias = "model-store",
        required = true,
        value_name = "PATH",
        value_parser = parse_repository
    )]
    pub model_repository: Vec<RepositoryArg>,

    /// The model to run (an ensemble's composing models load with it).
    #[arg(long, value_name = "NAME")]
    pub model: String,

    /// The version to run, a number or a version label; by default the
    /// one the model's traffic settings or version policy choose.
    #[arg(long, value_name = "N|LABEL", value_parser = parse_version)]
    pub model_version: Option<ModelVersion>,

    /// The records: a .jsonl, .parquet or .arrow file, an .npy file (a
    /// model of one input), a folder of <INPUT>.npy files, or
    /// NAME=FILE.npy, repeated, one per input.
    #[arg(long, required = true, value_name = "PATH|NAME=FILE.npy")]
    pub input: Vec<String>,

    /// The input's format when its name does not say it: jsonl, npy,
    /// parquet or arrow.
    #[arg(long, value_name = "FORMAT")]
    pub input_format: Option<String>,

    /// Where the results go: a file (a folder for .npy). An output that a
    /// cut-off run of the same job left is resumed.
    #[arg(long, value_name = "PATH")]
    pub output: PathBuf,

    /// The output's format; by default the one its name says, else the
    /// input's.
    #[arg(long, value_name = "FORMAT")]
    pub output_format: Option<String>,

    /// Records in flight at once, for the model's batcher to batch; by
    /// default four times its max_batch_size (at least 64).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,

    /// Start over: discard what the output holds instead of resuming.
    #[arg(long)]
    pub overwrite: bool,

    /// No progress bar (it is drawn only on a terminal anyway); the
    /// summary line is still printed.
    #[arg(long, short)]
    pub quiet: bool,

    /// Commit the output (what a resumed job keeps) after this many
    /// records...
    #[arg(long, default_value_t = 65_536, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub commit_records: u32,

    /// ...or after this many seconds, whichever comes first.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub commit_secs: u64,

    /// Path of the ONNX Runtime shared library (libonnxruntime.so).
    #[arg(long, env = "ORT_DYLIB_PATH", value_name = "PATH")]
    pub onnxruntime_library: Option<PathBuf>,

    /// The folder holding TensorFlow's C API (libtensorflow_cc.so.2), for
    /// SavedModels. Default: the loader's path.
    #[arg(long, env = "TENSORFLOW_DIR", value_name = "DIR")]
    pub tensorflow_library_dir: Option<PathBuf>,

    /// A backend setting, `<backend>,<key>=<value>`, as the server takes
    /// them: `python,python-path=PATH` names the interpreter of Python
    /// models' workers.
    #[arg(long = "backend-config", value_name = "BACKEND,KEY=VALUE")]
    pub backend_config: Vec<String>,

    /// Require a complete config.pbtxt; when false, missing fields are
    /// filled in from the model file.
    #[arg(long, default_value = "false", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub strict_model_config: bool,

    /// Verbose logging level (stderr); 0 logs warnings and errors only.
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,

    /// Append log lines to this file instead of stderr.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    #[command(flatten)]
    pub devices: DeviceFlags,
}

/// A batch job, checked, and the engine it runs on.
#[derive(Debug)]
pub struct BatchConfig {
    pub engine: EngineOptions,
    pub control: ModelControl,
    pub(crate) backends: BackendSettings,
    pub job: Job,
}

impl BatchArgs {
    /// INFO lines only with --log-verbose, so that the job's own output
    /// is not buried under model loading.
    pub fn log_settings(&self) -> LogSettings {
        LogSettings {
            log_file: self
                .log_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            log_info: self.log_verbose > 0,
            log_verbose_level: self.log_verbose.saturating_sub(1),
            ..LogSettings::default()
        }
    }

    pub fn into_config(self, progress: bool) -> anyhow::Result<BatchConfig> {
        let job = Job {
            model: self.model.clone(),
            version: self.model_version.clone().unwrap_or_default(),
            input: input_files(&self.input)?,
            input_format: self
                .input_format
                .as_deref()
                .map(Format::parse)
                .transpose()?,
            output: self.output.clone(),
            output_format: self
                .output_format
                .as_deref()
                .map(Format::parse)
                .transpose()?,
            concurrency: self.concurrency.map(|c| c as usize),
            overwrite: self.overwrite,
            progress: progress && !self.quiet,
            commit: CommitPolicy {
                rows: self.commit_records as usize,
                interval: Duration::from_secs(self.commit_secs),
                ..CommitPolicy::default()
            },
            chunk_rows: 4096,
            group_rows: None,
        };
        let Repositories { roots, mirrors } = open_repositories(self.model_repository)?;
        Ok(BatchConfig {
            engine: EngineOptions {
                repositories: roots,
                mirrors,
                strict_model_config: self.strict_model_config,
                strict_readiness: nereid_engine::Readiness::Started,
                response_cache: None,
                devices: self.devices.devices()?,
            },
            // Explicit control with nothing at startup: the job loads its
            // model (and an ensemble's steps) through the repository load.
            control: ModelControl {
                mode: ControlMode::Explicit,
                startup_models: Vec::new(),
                poll_interval: Duration::ZERO,
                ..Default::default()
            },
            backends: BackendSettings {
                onnxruntime_library: self.onnxruntime_library,
                tensorflow_library_dir: self.tensorflow_library_dir,
                python: python_path(&self.backend_config)?,
            },
            job,
        })
    }
}

/// `--input` values: one path, or `NAME=FILE.npy` for each input.
/// `--model-version`: a version number or a version label.
fn parse_version(value: &str) -> Result<ModelVersion, String> {
    match ModelVersion::parse(value) {
        Some(ModelVersion::Number(n)) if n < 1 => {
            Err(format!("'{value}' is no version: versions are 1 or more"))
        }
        Some(version) => Ok(version),
        None => Err(format!(
            "'{value}' is neither a version number nor a version label"
        )),
    }
}

fn input_files(values: &[String]) -> anyhow::Result<InputFiles> {
    let named = |value: &str| {
        value
            .split_once('=')
            .filter(|(name, file)| !name.is_empty() && file.ends_with(".npy"))
            .map(|(name, file)| (name.to_string(), PathBuf::from(file)))
    };
    match values {
        [one] if named(one).is_none() => Ok(InputFiles::Path(PathBuf::from(one))),
        many => many
            .iter()
            .map(|v| {
                named(v).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--input {v}: with several --input flags each must be NAME=FILE.npy"
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .map(InputFiles::Named),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Args, Command};

    fn batch(args: &[&str]) -> BatchArgs {
        let mut argv = vec!["nereid", "batch"];
        argv.extend_from_slice(args);
        match Args::try_parse_from(argv).unwrap().command {
            Some(Command::Batch(batch)) => batch,
            other => panic!("not a batch command: {other:?}"),
        }
    }

    #[test]
    fn batch_flags_parse_beside_the_server_flags() {
        let args = batch(&[
            "--model-repository=/r",
            "--model=mlp",
            "--input=in.parquet",
            "--output=out.parquet",
            "--concurrency=32",
            "--backend-config=python,python-path=/usr/bin/python3",
        ]);
        assert_eq!((args.model.as_str(), args.concurrency), ("mlp", Some(32)));
        assert_eq!(args.model_repository.len(), 1);
        // The server's own flags still parse without a subcommand...
        let server = Args::try_parse_from(["nereid", "--model-repository=/a"]).unwrap();
        assert!(server.command.is_none());
        // ...and are not batch's.
        assert!(Args::try_parse_from(["nereid", "--http-port=1", "batch", "--model=m"]).is_err());
        assert!(
            Args::try_parse_from(["nereid", "batch", "--model=m", "--input=a", "--output=b"])
                .is_err(),
            "--model-repository is required"
        );
    }

    #[test]
    fn inputs_are_one_path_or_named_npy_files() {
        assert_eq!(
            input_files(&["in.jsonl".into()]).unwrap(),
            InputFiles::Path("in.jsonl".into())
        );
        assert_eq!(
            input_files(&["A=a.npy".into(), "B=x=b.npy".into()]).unwrap(),
            InputFiles::Named(vec![
                ("A".into(), "a.npy".into()),
                ("B".into(), "x=b.npy".into())
            ])
        );
        assert_eq!(
            input_files(&["X=x.npy".into()]).unwrap(),
            InputFiles::Named(vec![("X".into(), "x.npy".into())])
        );
        assert!(input_files(&["a.npy".into(), "b.npy".into()]).is_err());
    }
}
