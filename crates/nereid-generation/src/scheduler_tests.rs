use super::*;

fn limits() -> Limits {
    Limits {
        block_size: 4,
        total_blocks: 64,
        max_running: 8,
        slots: 16,
        tokens_per_step: 32,
        context_length: 256,
    }
}

fn prompt(first: u32, len: u32) -> Vec<u32> {
    (first..first + len).collect()
}

/// Runs one plan as a runtime would: every chunk computed, a token (100 +
/// the number generated so far) sampled where there are logits.
fn run_step(scheduler: &mut Scheduler) -> Plan {
    let plan = scheduler.plan();
    for chunk in &plan.chunks {
        scheduler.advance(chunk);
        if chunk.logits {
            let generated = scheduler.tokens(chunk.id).len() - scheduler.prompt_len(chunk.id);
            scheduler.push(chunk.id, 100 + generated as u32);
        }
    }
    plan
}

fn generated(scheduler: &Scheduler, id: SeqId) -> usize {
    scheduler.tokens(id).len() - scheduler.prompt_len(id)
}

#[test]
fn each_step_decodes_one_token_per_running_sequence_and_chunks_prompts() {
    let mut scheduler = Scheduler::new(limits());
    let a = scheduler.add(prompt(0, 50)).unwrap();
    let plan = run_step(&mut scheduler);
    assert_eq!(plan.chunks.len(), 1);
    assert_eq!((plan.chunks[0].start, plan.chunks[0].len), (0, 32));
    assert!(!plan.chunks[0].logits, "the prompt is not read yet");
    let plan = run_step(&mut scheduler);
    assert_eq!((plan.chunks[0].start, plan.chunks[0].len), (32, 18));
    assert!(plan.chunks[0].logits);
    let plan = run_step(&mut scheduler);
    assert_eq!((plan.chunks[0].start, plan.chunks[0].len), (50, 1));
    assert_eq!(generated(&scheduler, a), 2);
}

#[test]
fn a_request_that_arrives_joins_the_running_batch_at_the_next_step() {
    let mut scheduler = Scheduler::new(limits());
    let a = scheduler.add(prompt(0, 8)).unwrap();
    run_step(&mut scheduler);
    run_step(&mut scheduler);
    let b = scheduler.add(prompt(500, 8)).unwrap();
    let plan = run_step(&mut scheduler);
    let ids: Vec<SeqId> = plan.chunks.iter().map(|c| c.id).collect();
    assert_eq!(
        ids,
        [a, b],
        "a decodes while b's prompt is read, in one step"
    );
    assert_eq!(plan.chunks[0].len, 1);
    assert_eq!(plan.chunks[1].len, 8);
}

#[test]
fn decoding_comes_before_prompts_within_the_token_budget() {
    let mut scheduler = Scheduler::new(Limits {
        tokens_per_step: 10,
        ..limits()
    });
    let a = scheduler.add(prompt(0, 4)).unwrap();
    run_step(&mut scheduler);
    let b = scheduler.add(prompt(100, 30)).unwrap();
    let plan = run_step(&mut scheduler);
    assert_eq!(plan.chunks[0].id, a);
    assert_eq!((plan.chunks[1].id, plan.chunks[1].len), (b, 9));
}

#[test]
fn a_finished_sequence_leaves_at_once_and_its_blocks_are_no_longer_in_use() {
    let mut scheduler = Scheduler::new(limits());
    let a = scheduler.add(prompt(0, 10)).unwrap();
    let b = scheduler.add(prompt(100, 10)).unwrap();
    run_step(&mut scheduler);
    assert_eq!(scheduler.blocks_in_use(), 6);
    scheduler.finish(a);
    let plan = run_step(&mut scheduler);
    assert!(plan.chunks.iter().all(|c| c.id == b));
    assert!(plan.ops.contains(&KvOp::Remove { slot: 0, from: 8 }));
    scheduler.finish(b);
    assert_eq!(scheduler.blocks_in_use(), 0);
    assert!(scheduler.is_idle());
}

#[test]
fn a_cancelled_waiting_sequence_is_never_scheduled() {
    let mut scheduler = Scheduler::new(Limits {
        max_running: 1,
        ..limits()
    });
    let a = scheduler.add(prompt(0, 4)).unwrap();
    let b = scheduler.add(prompt(10, 4)).unwrap();
    run_step(&mut scheduler);
    scheduler.finish(b);
    scheduler.finish(a);
    let plan = run_step(&mut scheduler);
    assert!(plan.chunks.is_empty());
    assert_eq!(scheduler.blocks_in_use(), 0);
}

#[test]
fn a_shared_prompt_prefix_is_read_from_the_cache_not_computed_again() {
    let mut scheduler = Scheduler::new(limits());
    let system = prompt(0, 20);
    let a = scheduler
        .add([system.clone(), vec![900, 901]].concat())
        .unwrap();
    run_step(&mut scheduler);
    let b = scheduler
        .add([system, vec![950, 951, 952]].concat())
        .unwrap();
    let held_before = scheduler.blocks_held();
    let plan = run_step(&mut scheduler);
    let copy = KvOp::Copy {
        from: 0,
        to: 1,
        positions: 20,
    };
    assert!(plan.ops.contains(&copy), "{:?}", plan.ops);
    let chunk = plan.chunks.iter().find(|c| c.id == b).unwrap();
    assert_eq!((chunk.start, chunk.len), (20, 3), "only the new tokens");
    assert_eq!(scheduler.counters().prefix_hits, 20);
    assert_eq!(scheduler.blocks_held(), held_before + 1, "one new block");
    assert_eq!(generated(&scheduler, a), 2);
}

#[test]
fn a_finished_sequence_prefix_serves_a_later_prompt_until_its_memory_is_needed() {
    let mut scheduler = Scheduler::new(Limits {
        total_blocks: 8,
        ..limits()
    });
    let a = scheduler.add(prompt(0, 12)).unwrap();
    run_step(&mut scheduler);
    scheduler.finish(a);
    assert_eq!(scheduler.blocks_in_use(), 0);
    let b = scheduler.add(prompt(0, 14)).unwrap();
    let plan = run_step(&mut scheduler);
    assert!(matches!(
        plan.ops[..],
        [KvOp::Remove { .. }, KvOp::Copy { positions: 12, .. }]
    ));
    assert_eq!(plan.chunks[0].start, 12);
    scheduler.finish(b);
    // A prompt that needs every block takes the cached ones back.
    let c = scheduler.add(prompt(1000, 31)).unwrap();
    let plan = run_step(&mut scheduler);
    assert_eq!((plan.chunks[0].id, plan.chunks[0].len), (c, 31));
    assert_eq!(scheduler.blocks_in_use(), 8);
}

#[test]
fn when_blocks_run_out_the_newest_sequence_is_preempted_and_computed_again_later() {
    let mut scheduler = Scheduler::new(Limits {
        total_blocks: 6,
        ..limits()
    });
    let a = scheduler.add(prompt(0, 8)).unwrap();
    let b = scheduler.add(prompt(100, 8)).unwrap();
    run_step(&mut scheduler);
    // Each holds 2 full blocks + grows; 6 blocks hold 24 positions.
    let mut preempted_at = None;
    for step in 0..40 {
        run_step(&mut scheduler);
        if scheduler.counters().preemptions > 0 && preempted_at.is_none() {
            preempted_at = Some(step);
            assert_eq!(scheduler.running(), 1);
            assert_eq!(scheduler.waiting(), 1, "b waits to be computed again");
        }
        if generated(&scheduler, a) >= 14 {
            scheduler.finish(a);
        }
        if generated(&scheduler, b) >= 14 {
            scheduler.finish(b);
        }
        if scheduler.is_idle() {
            break;
        }
    }
    assert!(preempted_at.is_some());
    assert!(scheduler.is_idle(), "both finished");
    assert_eq!(scheduler.blocks_in_use(), 0);
}

#[test]
fn a_preempted_sequence_recomputes_its_prompt_and_tokens_so_far() {
    let mut scheduler = Scheduler::new(Limits {
        total_blocks: 4,
        ..limits()
    });
    let a = scheduler.add(prompt(0, 7)).unwrap();
    let b = scheduler.add(prompt(100, 7)).unwrap();
    run_step(&mut scheduler);
    run_step(&mut scheduler);
    // Both at 8 tokens, 7 computed; the next token needs a third block each.
    let plan = run_step(&mut scheduler);
    assert_eq!(scheduler.counters().preemptions, 1);
    assert!(plan.chunks.iter().all(|c| c.id == a));
    scheduler.finish(a);
    let plan = run_step(&mut scheduler);
    let chunk = plan.chunks.iter().find(|c| c.id == b).unwrap();
    assert_eq!(chunk.start, 0);
    assert_eq!(chunk.len, 9, "its prompt of 7 and the 2 tokens it had");
    assert!(chunk.logits);
}

#[test]
fn a_sequence_fails_for_memory_only_when_it_cannot_fit_alone() {
    let mut scheduler = Scheduler::new(Limits {
        total_blocks: 3,
        ..limits()
    });
    assert!(matches!(
        scheduler.add(prompt(0, 12)),
        Err(Refusal::NoMemory {
            needed: 4,
            total: 3,
            ..
        })
    ));
    let a = scheduler.add(prompt(0, 10)).unwrap();
    let mut failed = Vec::new();
    for _ in 0..10 {
        failed.extend(run_step(&mut scheduler).failed);
    }
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, a);
    assert_eq!(generated(&scheduler, a), 0, "it is gone");
    assert_eq!(scheduler.blocks_held(), 0);
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let mut scheduler = Scheduler::new(limits());
    assert_eq!(
        scheduler.add(prompt(0, 256)),
        Err(Refusal::TooLong {
            prompt: 256,
            context: 256
        })
    );
    assert!(scheduler.add(prompt(0, 255)).is_ok());
}

#[test]
fn no_more_than_max_running_sequences_run_at_once() {
    let mut scheduler = Scheduler::new(Limits {
        max_running: 2,
        ..limits()
    });
    for i in 0..5 {
        scheduler.add(prompt(i * 100, 3)).unwrap();
    }
    run_step(&mut scheduler);
    assert_eq!((scheduler.running(), scheduler.waiting()), (2, 3));
}

#[test]
fn a_long_prompt_does_not_hold_back_a_short_one_that_arrives_with_it() {
    let mut scheduler = Scheduler::new(Limits {
        tokens_per_step: 64,
        ..limits()
    });
    let long = scheduler.add(prompt(0, 200)).unwrap();
    let short = scheduler.add(prompt(1000, 10)).unwrap();
    let plan = run_step(&mut scheduler);
    let lens: Vec<(SeqId, usize, bool)> = plan
        .chunks
        .iter()
        .map(|c| (c.id, c.len, c.logits))
        .collect();
    assert_eq!(
        lens,
        [(long, 54, false), (short, 10, true)],
        "the long one takes what is left"
    );
    assert_eq!(
        generated(&scheduler, short),
        1,
        "the short one answers in the first step"
    );
}
