//! Tests of `testing/servicebus-broker/src/rest.rs`.

use super::*;

#[test]
fn paths_name_entities_subscriptions_and_rules() {
    assert_eq!(target("commit"), Some(Target::Entity("commit".into())));
    assert_eq!(
        target("t/Subscriptions/s"),
        Some(Target::Subscription {
            topic: "t".into(),
            name: "s".into()
        })
    );
    assert_eq!(
        target("t/subscriptions/s/Rules"),
        Some(Target::Rules {
            topic: "t".into(),
            subscription: "s".into()
        })
    );
    assert_eq!(
        target("t/Subscriptions/s/Rules/$Default"),
        Some(Target::Rule {
            topic: "t".into(),
            subscription: "s".into(),
            name: "$Default".into()
        })
    );
    assert_eq!(target(""), None);
    assert_eq!(target("t/Subscriptions"), None);
    assert_eq!(target("t/Subscriptions/s/x"), None);
    assert_eq!(target("$Resources/Queues"), None);
}
