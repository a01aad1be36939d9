//! Fuzzes the schedule parser: any text parses or gives a one-line error, never a
//! panic; a parsed schedule prints as text that parses back to the same schedule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ordo_schedule::Schedule;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Schedule::parse(text) {
        Ok(schedule) => {
            let printed = schedule.to_string();
            let again = Schedule::parse(&printed)
                .unwrap_or_else(|e| panic!("printed schedule does not parse: {e}\n{printed}"));
            // Everything but the source line numbers must survive the round trip.
            let orders = |s: &Schedule| {
                s.orderings
                    .iter()
                    .map(|o| (o.before.clone(), o.after.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                orders(&again),
                orders(&schedule),
                "printing and parsing changed the schedule:\n{printed}"
            );
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains('\n'), "multi-line error: {message:?}");
        }
    }
});
