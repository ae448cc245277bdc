use super::*;

#[test]
fn parameters_parse_with_vllm_names_and_triton_string_values() {
    let p = SamplingParams::from_json(
        r#"{"temperature": "0.5", "top_p": 0.9, "top_k": -1, "max_tokens": "32",
            "seed": 7, "stop": "\n\n", "ignore_eos": "true", "n": 1}"#,
    )
    .unwrap();
    assert_eq!(p.temperature, 0.5);
    assert_eq!((p.top_p, p.top_k, p.max_tokens), (0.9, 0, 32));
    assert_eq!((p.seed, p.ignore_eos), (Some(7), true));
    assert_eq!(p.stop, ["\n\n"]);
}

#[test]
fn unknown_or_bad_parameters_are_refused_naming_the_key() {
    let refused = |text: &str| SamplingParams::from_json(text).unwrap_err().to_string();
    assert_eq!(
        refused(r#"{"temprature": 0}"#),
        "sampling parameter 'temprature': is not a sampling parameter this backend knows"
    );
    assert!(refused(r#"{"max_tokens": 0}"#).contains("'max_tokens': must be at least 1"));
    assert!(refused(r#"{"max_tokens": -3}"#).contains("must be 0 or more"));
    assert!(refused(r#"{"top_p": 0}"#).contains("'top_p'"));
    assert!(refused(r#"{"n": 2}"#).contains("only 1 is supported"));
    assert!(refused(r#"{"temperature": "hot"}"#).contains("expected a number"));
    assert!(refused("[1]").contains("must be a JSON object"));
}

#[test]
fn a_request_own_parameters_may_carry_other_keys() {
    let mut map = serde_json::Map::new();
    map.insert("stream".into(), true.into());
    map.insert("max_tokens".into(), 5.into());
    let p = SamplingParams::from_map(&map, false).unwrap();
    assert_eq!(p.max_tokens, 5);
}

fn logits() -> Vec<f32> {
    vec![0.1, 2.0, 1.9, -1.0, 2.0, 0.5]
}

#[test]
fn greedy_takes_the_most_likely_token_and_the_lowest_on_a_tie() {
    let params = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params, &[]);
    assert_eq!(sampler.sample(&logits(), &[]), 1);
    assert_eq!(
        sampler.sample(&logits(), &[1]),
        4,
        "a banned token is skipped"
    );
}

#[test]
fn a_seed_gives_the_same_draws() {
    let params = SamplingParams {
        temperature: 1.0,
        seed: Some(42),
        ..SamplingParams::default()
    };
    let draw = |params: &SamplingParams| {
        let mut sampler = Sampler::new(params.clone(), &[]);
        (0..50)
            .map(|_| sampler.sample(&logits(), &[]))
            .collect::<Vec<_>>()
    };
    let first = draw(&params);
    assert_eq!(first, draw(&params));
    let distinct: std::collections::BTreeSet<_> = first.iter().collect();
    assert!(
        distinct.len() > 2,
        "a temperature of 1 spreads the draws: {first:?}"
    );
    let other = SamplingParams {
        seed: Some(43),
        ..params
    };
    assert_ne!(first, draw(&other));
}

#[test]
fn top_k_and_top_p_cut_the_candidates() {
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 2,
        seed: Some(1),
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params.clone(), &[]);
    for _ in 0..100 {
        let t = sampler.sample(&logits(), &[]);
        assert!(t == 1 || t == 4, "top-2 holds tokens 1 and 4, got {t}");
    }
    let params = SamplingParams {
        top_k: 0,
        top_p: 0.01,
        ..params
    };
    let mut sampler = Sampler::new(params, &[]);
    for _ in 0..20 {
        assert_eq!(sampler.sample(&logits(), &[]), 1, "a tiny top-p keeps one");
    }
}

#[test]
fn penalties_push_repeated_tokens_down() {
    let params = SamplingParams {
        temperature: 0.0,
        frequency_penalty: 1.0,
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params, &[]);
    let tokens: Vec<u32> = (0..3).map(|_| sampler.sample(&logits(), &[])).collect();
    assert_eq!(tokens, [1, 4, 2]);
}
