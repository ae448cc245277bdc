//! Chat templates: the Jinja template that turns a conversation into a
//! model's prompt, rendered as Hugging Face's `apply_chat_template` renders
//! it (`messages`, `add_generation_prompt`, `bos_token`, `eos_token`,
//! `raise_exception`; blocks trimmed).
//!
//! A model's template is, in this order: `chat_template.jinja` in its
//! folder, the `chat_template` field of its folder's
//! `tokenizer_config.json`, or [`DEFAULT_TEMPLATE`].

use minijinja::{Environment, ErrorKind, context};
use serde::Serialize;
use serde_json::Value;

use super::error::ApiError;

/// The file in a model's folder that holds its chat template.
pub const TEMPLATE_FILE: &str = "chat_template.jinja";

/// The Hugging Face tokenizer settings whose `chat_template` is used when
/// the folder has no [`TEMPLATE_FILE`].
pub const TOKENIZER_CONFIG: &str = "tokenizer_config.json";

/// For a model without a template: one `role: content` line per message,
/// then `assistant:` for the model to go on from.
pub const DEFAULT_TEMPLATE: &str = "{% for message in messages %}\
{{ message.role }}: {{ message.content }}\n\
{% endfor %}\
{% if add_generation_prompt %}assistant:{% endif %}";

/// One message as a template sees it: text content only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateMessage {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A model's chat template with its special tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

impl Default for ChatTemplate {
    fn default() -> ChatTemplate {
        ChatTemplate::new(DEFAULT_TEMPLATE)
    }
}

impl ChatTemplate {
    pub fn new(source: impl Into<String>) -> ChatTemplate {
        ChatTemplate {
            source: source.into(),
            bos_token: String::new(),
            eos_token: String::new(),
        }
    }

    /// The template of a model whose folder's files `read` gives (see the
    /// module's doc): `None` for a file the folder does not have.
    pub fn of_model(
        read: impl Fn(&str) -> Result<Option<Vec<u8>>, ApiError>,
    ) -> Result<ChatTemplate, ApiError> {
        let tokenizer = match read(TOKENIZER_CONFIG)? {
            Some(bytes) => Some(
                serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| unreadable(TOKENIZER_CONFIG, e))?,
            ),
            None => None,
        };
        let source = match read(TEMPLATE_FILE)? {
            Some(bytes) => {
                Some(String::from_utf8(bytes).map_err(|e| unreadable(TEMPLATE_FILE, e))?)
            }
            None => None,
        };
        let source = source.or_else(|| tokenizer.as_ref().and_then(template_field));
        let Some(source) = source else {
            return Ok(ChatTemplate::default());
        };
        let token = |key| tokenizer.as_ref().map(|t| special_token(t, key));
        Ok(ChatTemplate {
            source,
            bos_token: token("bos_token").unwrap_or_default(),
            eos_token: token("eos_token").unwrap_or_default(),
        })
    }

    /// The prompt for `messages`, ending where the assistant's answer goes.
    /// A template's `raise_exception` (it refuses the conversation) is the
    /// client's error; a broken template is the server's.
    pub fn render(&self, messages: &[TemplateMessage]) -> Result<String, ApiError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| ApiError::server(format!("the model's chat template is invalid: {e}")))?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidOperation => ApiError::invalid_param(
                    "messages",
                    e.detail()
                        .unwrap_or("the chat template refused the messages"),
                ),
                _ => ApiError::server(format!("the model's chat template failed: {e}")),
            })
    }
}

fn raise_exception(message: String) -> Result<String, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

fn unreadable(file: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::server(format!("cannot read the model's {file}: {e}"))
}

/// `chat_template` as Hugging Face writes it: a string, or a list of
/// named templates of which `default` is the one.
fn template_field(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(source) => Some(source.clone()),
        Value::Array(named) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
        _ => None,
    }
}

/// A special token: a string, or an added-token object with `content`.
fn special_token(config: &Value, key: &str) -> String {
    let token = config.get(key);
    let text = token
        .and_then(Value::as_str)
        .or_else(|| token?.get("content")?.as_str());
    text.unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files of `dir`, as the engine reads a model's folder.
    fn files(dir: &std::path::Path) -> impl Fn(&str) -> Result<Option<Vec<u8>>, ApiError> + '_ {
        move |name| match std::fs::read(dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(unreadable(name, e)),
        }
    }

    fn message(role: &str, content: &str) -> TemplateMessage {
        TemplateMessage {
            role: role.into(),
            content: content.into(),
            name: None,
            tool_calls: None,
            tool_call_id: None,
        }
    }

    #[test]
    fn the_default_template_lists_the_messages() {
        let prompt = ChatTemplate::default()
            .render(&[message("system", "Be brief."), message("user", "Hi")])
            .unwrap();
        assert_eq!(prompt, "system: Be brief.\nuser: Hi\nassistant:");
    }

    #[test]
    fn a_hugging_face_template_renders_as_transformers_renders_it() {
        // Blocks trimmed, special tokens, Python string methods.
        let source = "{{ bos_token }}\n{% for m in messages %}\n\
            <|{{ m['role'] }}|>{{ m['content'].strip() }}{{ eos_token }}\n\
            {% endfor %}\n{% if add_generation_prompt %}<|assistant|>{% endif %}";
        let dir = tempfile::tempdir().unwrap();
        let config = serde_json::json!({
            "chat_template": source,
            "bos_token": "<s>",
            "eos_token": {"content": "</s>", "lstrip": false},
        });
        std::fs::write(dir.path().join(TOKENIZER_CONFIG), config.to_string()).unwrap();
        let template = ChatTemplate::of_model(files(dir.path())).unwrap();
        let prompt = template.render(&[message("user", " Hi ")]).unwrap();
        // The newlines after block tags go, those after expressions stay.
        assert_eq!(prompt, "<s>\n<|user|>Hi</s>\n<|assistant|>");
    }

    #[test]
    fn the_template_file_comes_before_the_tokenizer_config() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            ChatTemplate::of_model(files(dir.path())).unwrap(),
            ChatTemplate::default()
        );
        let config = serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "default {{ messages|length }}"},
        ]});
        std::fs::write(dir.path().join(TOKENIZER_CONFIG), config.to_string()).unwrap();
        let template = ChatTemplate::of_model(files(dir.path())).unwrap();
        assert_eq!(
            template.render(&[message("user", "a")]).unwrap(),
            "default 1"
        );
        std::fs::write(dir.path().join(TEMPLATE_FILE), "file").unwrap();
        let template = ChatTemplate::of_model(files(dir.path())).unwrap();
        assert_eq!(template.render(&[]).unwrap(), "file");
    }

    #[test]
    fn raise_exception_refuses_the_messages_and_a_broken_template_is_the_servers() {
        let template = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}\
             {{ raise_exception('Conversations must start with a user message') }}{% endif %}",
        );
        let error = template.render(&[message("assistant", "x")]).unwrap_err();
        assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(
            error.message,
            "Conversations must start with a user message"
        );
        let error = ChatTemplate::new("{% for %}").render(&[]).unwrap_err();
        assert_eq!(error.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    }
}
