//! Just enough XML for the proxy to reshape EC2's answers: every element of a document with its byte
//! ranges (whole element, and content), so that an answer can be cut and spliced without re-encoding
//! what it does not touch. Built on `xmlparser` (the tokenizer the AWS SDK itself reads XML with).

/// One element of a document.
#[derive(Debug, Clone)]
pub struct Elem {
    pub name: String,
    /// From `<` of its start tag to the end of its end tag.
    pub start: usize,
    pub end: usize,
    /// Its content (empty range for `<x/>`).
    pub inner_start: usize,
    pub inner_end: usize,
    pub parent: Option<usize>,
}

/// Every element of `doc`, in document order.
pub fn elements(doc: &str) -> Vec<Elem> {
    let mut out: Vec<Elem> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    for token in xmlparser::Tokenizer::from(doc) {
        let Ok(token) = token else { break };
        match token {
            xmlparser::Token::ElementStart { local, span, .. } => {
                out.push(Elem {
                    name: local.as_str().to_string(),
                    start: span.start(),
                    end: span.end(),
                    inner_start: span.end(),
                    inner_end: span.end(),
                    parent: stack.last().copied(),
                });
                stack.push(out.len() - 1);
            }
            xmlparser::Token::ElementEnd { end, span } => match end {
                xmlparser::ElementEnd::Open => {
                    if let Some(&i) = stack.last() {
                        out[i].inner_start = span.end();
                        out[i].inner_end = span.end();
                    }
                }
                xmlparser::ElementEnd::Empty => {
                    if let Some(i) = stack.pop() {
                        out[i].end = span.end();
                        out[i].inner_start = span.end();
                        out[i].inner_end = span.end();
                    }
                }
                xmlparser::ElementEnd::Close(..) => {
                    if let Some(i) = stack.pop() {
                        out[i].end = span.end();
                        out[i].inner_end = span.start();
                    }
                }
            },
            _ => {}
        }
    }
    out
}

/// The children of element `parent` (or the top-level elements, for `None`) named `name`.
pub fn children<'a>(
    all: &'a [Elem],
    parent: Option<usize>,
    name: &'a str,
) -> impl Iterator<Item = usize> + 'a {
    all.iter()
        .enumerate()
        .filter(move |(_, e)| e.parent == parent && e.name == name)
        .map(|(i, _)| i)
}

/// The first child of `parent` named `name`.
pub fn child(all: &[Elem], parent: Option<usize>, name: &str) -> Option<usize> {
    children(all, parent, name).next()
}

/// The text of element `i`.
pub fn text<'a>(doc: &'a str, all: &[Elem], i: usize) -> &'a str {
    &doc[all[i].inner_start..all[i].inner_end]
}

/// The texts of every element named `name` in `doc`, in order.
pub fn texts(doc: &str, name: &str) -> Vec<String> {
    let all = elements(doc);
    all.iter()
        .enumerate()
        .filter(|(_, e)| e.name == name)
        .map(|(i, _)| text(doc, &all, i).to_string())
        .collect()
}

/// The element found by following `path` of child names from the top.
pub fn find(all: &[Elem], path: &[&str]) -> Option<usize> {
    let mut at = None;
    for name in path {
        at = Some(child(all, at, name)?);
    }
    at
}

/// One instance of a DescribeInstances (or RunInstances) answer, with its reservation.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The reservation's own elements before and after its `instancesSet`.
    pub reservation: usize,
    pub head: String,
    pub tail: String,
    /// The instance's `<item>...</item>`.
    pub item: String,
    pub id: String,
}

/// Every instance of a DescribeInstances answer, in order, with the range of its `reservationSet`.
pub fn instances(doc: &str) -> Option<(Vec<Listed>, (usize, usize))> {
    let all = elements(doc);
    let root = all.iter().position(|e| e.parent.is_none())?;
    let set = child(&all, Some(root), "reservationSet")?;
    let mut out = Vec::new();
    for (r, res) in children(&all, Some(set), "item").enumerate() {
        let Some(iset) = child(&all, Some(res), "instancesSet") else {
            continue;
        };
        let head = doc[all[res].inner_start..all[iset].start].to_string();
        let tail = doc[all[iset].end..all[res].inner_end].to_string();
        for item in children(&all, Some(iset), "item") {
            let id = child(&all, Some(item), "instanceId")
                .map(|i| text(doc, &all, i).to_string())
                .unwrap_or_default();
            out.push(Listed {
                reservation: r,
                head: head.clone(),
                tail: tail.clone(),
                item: doc[all[item].start..all[item].end].to_string(),
                id,
            });
        }
    }
    Some((out, (all[set].start, all[set].end)))
}

/// A `reservationSet` of `listed`, instances of one reservation in a row sharing one `<item>`.
pub fn reservation_set(listed: &[Listed]) -> String {
    let mut out = String::from("<reservationSet>");
    let mut i = 0;
    while i < listed.len() {
        let r = listed[i].reservation;
        out.push_str("<item>");
        out.push_str(&listed[i].head);
        out.push_str("<instancesSet>");
        let tail = listed[i].tail.clone();
        while i < listed.len() && listed[i].reservation == r {
            out.push_str(&listed[i].item);
            i += 1;
        }
        out.push_str("</instancesSet>");
        out.push_str(&tail);
        out.push_str("</item>");
    }
    out.push_str("</reservationSet>");
    out
}

/// `item` (an instance) with the text of its child `name` replaced by `value`.
pub fn replace_child_text(item: &str, name: &str, value: &str) -> String {
    let all = elements(item);
    let Some(top) = all.iter().position(|e| e.parent.is_none()) else {
        return item.to_string();
    };
    match child(&all, Some(top), name) {
        Some(c) => format!(
            "{}{value}{}",
            &item[..all[c].inner_start],
            &item[all[c].inner_end..]
        ),
        None => item.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_and_splices() {
        let doc = "<?xml version=\"1.0\"?><R xmlns=\"x\"><requestId>q</requestId><reservationSet>\
            <item><reservationId>r-1</reservationId><instancesSet><item><instanceId>i-1</instanceId>\
            <launchTime>t0</launchTime></item><item><instanceId>i-2</instanceId><x/></item>\
            </instancesSet><ownerId>o</ownerId></item></reservationSet></R>";
        let (listed, (s, e)) = instances(doc).unwrap();
        assert_eq!(
            listed.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
            ["i-1", "i-2"]
        );
        assert!(
            doc[s..e].starts_with("<reservationSet>") && doc[s..e].ends_with("</reservationSet>")
        );
        let rebuilt = reservation_set(&listed[1..]);
        assert_eq!(
            rebuilt,
            "<reservationSet><item><reservationId>r-1</reservationId><instancesSet><item>\
             <instanceId>i-2</instanceId><x/></item></instancesSet><ownerId>o</ownerId></item>\
             </reservationSet>"
        );
        assert_eq!(
            replace_child_text(&listed[0].item, "launchTime", "t1"),
            "<item><instanceId>i-1</instanceId><launchTime>t1</launchTime></item>"
        );
    }
}
