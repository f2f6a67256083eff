//! Where a run's aliases (the backend's names for it) come from: the request's and the response
//! header's, known at go-live, and the JSON pointers looked for in each event.

use pingora_http::ResponseHeader;

use crate::config::Alias;

/// The aliases known at go-live: the request's (`request:` sources, read by the record route)
/// and the response header's (`header:` sources).
pub(super) fn known_aliases(
    aliases: &[Alias],
    request_aliases: Vec<String>,
    header: &ResponseHeader,
) -> Vec<String> {
    let from_header = aliases.iter().filter_map(|a| match a {
        Alias::Header(h) => header
            .headers
            .get(h.as_str())?
            .to_str()
            .ok()
            .map(str::to_string),
        _ => None,
    });
    request_aliases.into_iter().chain(from_header).collect()
}

/// The JSON pointers of the `event:` aliases, looked for in each event.
pub(super) fn event_aliases(aliases: &[Alias]) -> Vec<String> {
    aliases
        .iter()
        .filter_map(|a| match a {
            Alias::Event(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KeySource;

    #[test]
    fn aliases_known_at_go_live_come_from_the_request_then_the_header_and_events_name_pointers() {
        let aliases = vec![
            Alias::Event("/thread_id".into()),
            Alias::Header("x-backend-run".into()),
            Alias::Request(KeySource::Json {
                pointer: "/id".into(),
                field: None,
            }),
            Alias::Header("x-absent".into()),
        ];
        let mut header = ResponseHeader::build(200, None).unwrap();
        header.insert_header("x-backend-run", "b-7").unwrap();
        let known = known_aliases(&aliases, vec!["req-1".into()], &header);
        assert_eq!(known, ["req-1", "b-7"]);
        assert_eq!(event_aliases(&aliases), ["/thread_id"]);
    }
}
