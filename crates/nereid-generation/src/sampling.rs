//! What a request asks of generation (vLLM's `SamplingParams`, as JSON in
//! Triton's `sampling_parameters` input) and the sampler that draws each
//! token from the model's logits: penalties, temperature, top-k, top-p and
//! min-p, from a generator seeded per request. Temperature 0 is greedy
//! (the most likely token, the lowest id on a tie), so it and a seeded
//! draw give the same tokens every time for the same logits.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// `max_tokens` when a request names none (vLLM's default).
pub const DEFAULT_MAX_TOKENS: usize = 16;

/// The parameters of one request's generation.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub temperature: f32,
    pub top_p: f32,
    /// 0: every token.
    pub top_k: usize,
    pub min_p: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub include_stop_str_in_output: bool,
    pub skip_special_tokens: bool,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub repetition_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            max_tokens: DEFAULT_MAX_TOKENS,
            min_tokens: 0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            seed: None,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            include_stop_str_in_output: false,
            skip_special_tokens: true,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
        }
    }
}

/// A sampling parameter that is unknown, of the wrong type or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sampling parameter '{key}': {reason}")]
pub struct BadParameter {
    pub key: String,
    pub reason: String,
}

fn bad(key: &str, reason: impl Into<String>) -> BadParameter {
    BadParameter {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Keys that are accepted only at the value that changes nothing.
const INERT: [(&str, &str); 6] = [
    ("n", "1"),
    ("best_of", "1"),
    ("use_beam_search", "false"),
    ("logprobs", "null or 0"),
    ("prompt_logprobs", "null or 0"),
    ("spaces_between_special_tokens", "true"),
];

impl SamplingParams {
    /// Parses `sampling_parameters`: a JSON object of vLLM's keys, whose
    /// numbers and booleans may also be written as strings (as Triton's
    /// vLLM backend accepts them). An unknown key is refused.
    pub fn from_json(text: &str) -> Result<SamplingParams, BadParameter> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| bad("sampling_parameters", format!("not JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(bad("sampling_parameters", "must be a JSON object"));
        };
        SamplingParams::from_map(&map, true)
    }

    /// As [`SamplingParams::from_json`], from an object; with `strict`
    /// false, keys that are not vLLM's are left alone (a request's own
    /// parameters carry other things too).
    pub fn from_map(
        map: &Map<String, Value>,
        strict: bool,
    ) -> Result<SamplingParams, BadParameter> {
        let mut params = SamplingParams::default();
        for (key, value) in map {
            if value.is_null() {
                continue;
            }
            if !params.set(key, value)? && strict {
                return Err(bad(key, "is not a sampling parameter this backend knows"));
            }
        }
        params.check()?;
        Ok(params)
    }

    /// Sets `key`; false when it is not a sampling parameter.
    fn set(&mut self, key: &str, value: &Value) -> Result<bool, BadParameter> {
        match key {
            "max_tokens" => self.max_tokens = count(key, value)?,
            "min_tokens" => self.min_tokens = count(key, value)?,
            "temperature" => self.temperature = number(key, value)?,
            "top_p" => self.top_p = number(key, value)?,
            "top_k" => self.top_k = top_k(value)?,
            "min_p" => self.min_p = number(key, value)?,
            "seed" => self.seed = Some(integer(key, value)? as u64),
            "stop" => self.stop = strings(key, value)?,
            "stop_token_ids" => self.stop_token_ids = token_ids(key, value)?,
            "ignore_eos" => self.ignore_eos = boolean(key, value)?,
            "include_stop_str_in_output" => self.include_stop_str_in_output = boolean(key, value)?,
            "skip_special_tokens" => self.skip_special_tokens = boolean(key, value)?,
            "presence_penalty" => self.presence_penalty = number(key, value)?,
            "frequency_penalty" => self.frequency_penalty = number(key, value)?,
            "repetition_penalty" => self.repetition_penalty = number(key, value)?,
            _ => return inert(key, value),
        }
        Ok(true)
    }

    fn check(&self) -> Result<(), BadParameter> {
        if self.max_tokens == 0 {
            return Err(bad("max_tokens", "must be at least 1"));
        }
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(bad("temperature", "must be a number of 0 or more"));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(bad("top_p", "must be in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(bad("min_p", "must be in [0, 1]"));
        }
        for (key, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&value) {
                return Err(bad(key, "must be in [-2, 2]"));
            }
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(bad("repetition_penalty", "must be above 0"));
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(bad("stop", "a stop string may not be empty"));
        }
        Ok(())
    }

    /// Whether every token is the most likely one.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }
}

fn inert(key: &str, value: &Value) -> Result<bool, BadParameter> {
    let Some((_, allowed)) = INERT.iter().find(|(k, _)| *k == key) else {
        return Ok(false);
    };
    let fine = match *allowed {
        "1" => integer(key, value).is_ok_and(|n| n == 1),
        "false" => boolean(key, value).is_ok_and(|b| !b),
        "true" => boolean(key, value).is_ok_and(|b| b),
        _ => integer(key, value).is_ok_and(|n| n == 0),
    };
    match fine {
        true => Ok(true),
        false => Err(bad(key, format!("only {allowed} is supported"))),
    }
}

/// A JSON number, or a string holding one.
fn number(key: &str, value: &Value) -> Result<f32, BadParameter> {
    let n = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    n.filter(|n| n.is_finite())
        .map(|n| n as f32)
        .ok_or_else(|| bad(key, format!("expected a number, got {value}")))
}

fn integer(key: &str, value: &Value) -> Result<i64, BadParameter> {
    let n = match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    n.ok_or_else(|| bad(key, format!("expected an integer, got {value}")))
}

fn count(key: &str, value: &Value) -> Result<usize, BadParameter> {
    let n = integer(key, value)?;
    usize::try_from(n).map_err(|_| bad(key, format!("must be 0 or more, got {n}")))
}

/// vLLM's `top_k`: -1 (or 0) for every token.
fn top_k(value: &Value) -> Result<usize, BadParameter> {
    match integer("top_k", value)? {
        -1 | 0 => Ok(0),
        n if n > 0 => Ok(n as usize),
        n => Err(bad("top_k", format!("must be -1 or at least 1, got {n}"))),
    }
}

fn boolean(key: &str, value: &Value) -> Result<bool, BadParameter> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(bad(key, format!("expected true or false, got {value}"))),
        },
        _ => Err(bad(key, format!("expected true or false, got {value}"))),
    }
}

/// One string or a list of them.
fn strings(key: &str, value: &Value) -> Result<Vec<String>, BadParameter> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad(key, "expected a string or a list of strings")),
        _ => Err(bad(key, "expected a string or a list of strings")),
    }
}

fn token_ids(key: &str, value: &Value) -> Result<Vec<u32>, BadParameter> {
    let Value::Array(items) = value else {
        return Err(bad(key, "expected a list of token ids"));
    };
    items
        .iter()
        .map(|i| {
            i.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(key, format!("{i} is not a token id")))
        })
        .collect()
}

/// A small, fast generator (SplitMix64): one per request, so a seed gives
/// the same draws whatever else runs beside it.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from the process's hash keys and a counter.
    pub fn unseeded() -> Rng {
        use std::hash::{BuildHasher, RandomState};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Rng(RandomState::new().hash_one(n))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Below the best logit by more than this (after temperature), a token's
/// probability is under e^-30 of the best one's: left out of the draw.
const NEGLIGIBLE: f32 = 30.0;

/// Draws one request's tokens.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// How often each token was generated (for the penalties).
    generated: HashMap<u32, u32>,
    /// The prompt's tokens, for the repetition penalty.
    prompt: Vec<u32>,
    scratch: Vec<f32>,
}

impl Sampler {
    pub fn new(params: SamplingParams, prompt: &[u32]) -> Sampler {
        let rng = params.seed.map_or_else(Rng::unseeded, Rng::new);
        let prompt = match params.repetition_penalty != 1.0 {
            true => prompt.to_vec(),
            false => Vec::new(),
        };
        Sampler {
            params,
            rng,
            generated: HashMap::new(),
            prompt,
            scratch: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The next token from `logits` (one per vocabulary entry), never one
    /// of `banned`.
    pub fn sample(&mut self, logits: &[f32], banned: &[u32]) -> u32 {
        let plain = self.generated.is_empty() || !self.has_penalties();
        let token = if plain && banned.is_empty() && self.params.is_greedy() {
            argmax(logits)
        } else {
            let mut scores = std::mem::take(&mut self.scratch);
            scores.clear();
            scores.extend_from_slice(logits);
            self.penalize(&mut scores);
            for &b in banned {
                if let Some(s) = scores.get_mut(b as usize) {
                    *s = f32::NEG_INFINITY;
                }
            }
            let token = match self.params.is_greedy() {
                true => argmax(&scores),
                false => self.draw(&scores),
            };
            self.scratch = scores;
            token
        };
        *self.generated.entry(token).or_default() += 1;
        token
    }

    fn has_penalties(&self) -> bool {
        let p = &self.params;
        p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 || p.repetition_penalty != 1.0
    }

    fn penalize(&self, scores: &mut [f32]) {
        if !self.has_penalties() {
            return;
        }
        let p = &self.params;
        let mut repeated: Vec<u32> = self.generated.keys().copied().collect();
        repeated.extend(&self.prompt);
        if p.repetition_penalty != 1.0 {
            repeated.sort_unstable();
            repeated.dedup();
            for &t in &repeated {
                if let Some(s) = scores.get_mut(t as usize) {
                    *s = match *s > 0.0 {
                        true => *s / p.repetition_penalty,
                        false => *s * p.repetition_penalty,
                    };
                }
            }
        }
        for (&t, &n) in &self.generated {
            if let Some(s) = scores.get_mut(t as usize) {
                *s -= p.frequency_penalty * n as f32 + p.presence_penalty;
            }
        }
    }

    /// A draw from the tempered distribution, cut by top-k, top-p, min-p.
    fn draw(&mut self, scores: &[f32]) -> u32 {
        let inverse = 1.0 / self.params.temperature;
        let best = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let floor = best - NEGLIGIBLE * self.params.temperature;
        let mut candidates: Vec<(u32, f32)> = scores
            .iter()
            .enumerate()
            .filter(|&(_, &s)| s >= floor && s > f32::NEG_INFINITY)
            .map(|(i, &s)| (i as u32, (s - best) * inverse))
            .collect();
        candidates.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.params.top_k > 0 {
            candidates.truncate(self.params.top_k);
        }
        let mut probs: Vec<f64> = candidates.iter().map(|c| f64::from(c.1).exp()).collect();
        let keep = self.nucleus(&mut probs);
        let total: f64 = probs[..keep].iter().sum();
        let mut target = self.rng.next_f64() * total;
        for (candidate, p) in candidates.iter().zip(&probs).take(keep) {
            target -= p;
            if target < 0.0 {
                return candidate.0;
            }
        }
        candidates.get(keep.saturating_sub(1)).map_or(0, |c| c.0)
    }

    /// How many of the candidates (most likely first, unnormalized
    /// `probs`) top-p and min-p keep; at least one.
    fn nucleus(&self, probs: &mut [f64]) -> usize {
        let total: f64 = probs.iter().sum();
        let top_p = f64::from(self.params.top_p);
        let min = f64::from(self.params.min_p) * probs.first().copied().unwrap_or(0.0);
        let mut cumulative = 0.0;
        let mut keep = 0;
        for &p in probs.iter() {
            if keep > 0 && (cumulative >= top_p * total || p < min) {
                break;
            }
            cumulative += p;
            keep += 1;
        }
        keep.max(1).min(probs.len())
    }
}

/// The index of the largest value, the lowest on a tie.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
#[path = "sampling_tests.rs"]
mod tests;
