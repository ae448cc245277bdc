//! The OpenAI-compatible endpoint's flags: off unless `--openai-port` is
//! given.

use std::net::{IpAddr, SocketAddr};

use clap::Args;

use nereid_openai::{ApiKey, OpenAiEndpoint};

#[derive(Debug, Args)]
pub struct OpenAiFlags {
    /// Port of the OpenAI-compatible endpoint (/v1/models,
    /// /v1/completions, /v1/chat/completions, /v1/embeddings); off unless
    /// set.
    #[arg(long, value_name = "PORT")]
    pub openai_port: Option<u16>,

    /// Address the OpenAI-compatible endpoint binds (default: the
    /// --http-address).
    #[arg(long, value_name = "ADDRESS")]
    pub openai_address: Option<IpAddr>,

    /// The key every OpenAI request must carry as `Authorization: Bearer
    /// <key>`; without it, none is asked for.
    #[arg(
        long,
        env = "NEREID_OPENAI_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub openai_api_key: Option<String>,
}

impl OpenAiFlags {
    /// The endpoint, when `--openai-port` asks for one.
    pub fn endpoint(&self, http_address: IpAddr) -> anyhow::Result<Option<OpenAiEndpoint>> {
        let Some(port) = self.openai_port else {
            if self.openai_address.is_some() {
                anyhow::bail!("--openai-address needs --openai-port");
            }
            return Ok(None);
        };
        let api_key = match self.openai_api_key.as_deref().map(str::trim) {
            Some("") => anyhow::bail!("--openai-api-key is empty"),
            Some(key) => Some(ApiKey::new(key)),
            None => None,
        };
        let address = self.openai_address.unwrap_or(http_address);
        Ok(Some(OpenAiEndpoint {
            address: SocketAddr::new(address, port),
            api_key,
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Args;

    fn endpoint(flags: &[&str]) -> anyhow::Result<Option<crate::OpenAiEndpoint>> {
        let mut all = vec![
            "nereid",
            "--model-repository=/a",
            "--http-address=127.0.0.2",
        ];
        all.extend_from_slice(flags);
        let args = Args::try_parse_from(all).unwrap();
        args.openai.endpoint(args.http_address)
    }

    #[test]
    fn the_endpoint_is_off_unless_a_port_is_given() {
        assert!(endpoint(&[]).unwrap().is_none());
        let on = endpoint(&["--openai-port=9000"]).unwrap().unwrap();
        assert_eq!(on.address, "127.0.0.2:9000".parse().unwrap());
        assert!(on.api_key.is_none());
        let on = endpoint(&[
            "--openai-port=9000",
            "--openai-address=0.0.0.0",
            "--openai-api-key=sk-1",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(on.address, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(on.api_key, Some(crate::ApiKey::new("sk-1")));
        assert!(endpoint(&["--openai-address=0.0.0.0"]).is_err());
        assert!(endpoint(&["--openai-port=9000", "--openai-api-key= "]).is_err());
    }
}
