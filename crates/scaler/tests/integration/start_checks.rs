//! What is refused at start, before any machine is made: offerings of unknown types or of an
//! architecture the image does not run on, pool names whose machine names would not fit.

use crate::support;

use orca_scaler::check_offerings;
use support::{cloud, settings};

const A: &str = "amd64-small@zone-a";

/// Invalid offerings are refused before any machine is made, each named.
#[tokio::test]
async fn invalid_offerings_are_refused_at_start_naming_each() {
    let (_cloud, p) = cloud();
    let mut st = settings(
        1,
        &[
            "nope-small@zone-a",
            "arm64-small@zone-a",
            "amd64-small@zone-a",
        ],
    );
    st.archs = vec![orca::Arch::Amd64];
    let e = check_offerings(&p, &st).await.unwrap_err();
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].contains("nope-small@zone-a") && e[0].contains("unknown machine type"),
        "{e:?}"
    );
    assert!(
        e[1].contains("arm64-small@zone-a") && e[1].contains("arm64"),
        "{e:?}"
    );
    let long = settings(1, &[A]);
    let long = orca_scaler::Settings {
        pool: "p".repeat(50),
        ..long
    };
    let e = check_offerings(&p, &long).await.unwrap_err();
    assert!(e[0].contains("longer than the 63"), "{e:?}");
    assert!(check_offerings(&p, &settings(1, &[A])).await.is_ok());
}

/// An offering in a location the cloud does not know is refused at start, named, as an unknown type
/// is.
#[tokio::test]
async fn an_unknown_location_is_refused_at_start_naming_it() {
    let (_cloud, p) = cloud();
    let st = settings(1, &["amd64-small@nowhere", A]);
    let e = check_offerings(&p, &st).await.unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("amd64-small@nowhere") && e[0].contains("unknown location nowhere"),
        "{e:?}"
    );
}

/// What the settings alone show wrong (a pool name, no offering, a spec the library refuses) is
/// refused before the cloud is asked anything: a pool name with a character no label takes reaches
/// no cloud, not even for its catalogue.
#[tokio::test]
async fn what_the_settings_alone_show_wrong_is_refused_before_any_cloud_call() {
    use orca::layer::{Layered, Recorder};
    let (_cloud, p) = cloud();
    let recorder = Recorder::new();
    let p = Layered::new(p, recorder.clone());
    let bad = orca_scaler::Settings {
        pool: "Bad!".into(),
        ..settings(1, &[A, "amd64-small@zone-b"])
    };
    let e = check_offerings(&p, &bad).await.unwrap_err();
    assert!(e.iter().any(|p| p.contains("Bad!")), "{e:?}");
    assert_eq!(recorder.calls(), [], "no cloud call");
    let none = settings(1, &[]);
    assert!(check_offerings(&p, &none).await.is_err());
    assert_eq!(recorder.calls(), [], "no cloud call");
    let stalled = orca_scaler::Settings {
        parallel: 0,
        ..settings(1, &[A])
    };
    let e = check_offerings(&p, &stalled).await.unwrap_err();
    assert!(e.iter().any(|p| p.contains("--parallel")), "{e:?}");
    assert_eq!(recorder.calls(), [], "no cloud call");
    // Good settings are checked against the cloud.
    assert!(check_offerings(&p, &settings(1, &[A])).await.is_ok());
    assert!(!recorder.calls().is_empty());
}
