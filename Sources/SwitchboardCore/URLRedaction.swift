/// URLs with their secrets hidden: the one rule behind every description, error message and log
/// line that shows a URL or a request target.
///
/// A query value is a secret when its name, percent-decoded and compared case-insensitively, is
/// one of `token`, `access_token`, `api_key`, `key`, `password`, `secret`, `auth`, or contains
/// `token` (`refresh_token`, `tokenId`) or `password` (`sentinelPassword` of a Redis Sentinel URL). Such values print as `<redacted>`; all other values
/// (e.g. `session_id`) stay visible. The password of user info (`user:password@host`) is a
/// secret too.
///
/// ```swift
/// URLRedaction.redacting("/v1/ws?session_id=abc&token=s3cr3t")  // "/v1/ws?session_id=abc&token=<redacted>"
/// ```
public enum URLRedaction {
    /// What a secret is replaced with.
    public static let placeholder = "<redacted>"

    private static let secretNames: Set<String> = [
        "token", "access_token", "api_key", "key", "password", "secret", "auth",
    ]

    /// Whether the value of the query item `name` is a secret. `name` may be percent-encoded.
    public static func isSecretQueryName(_ name: String) -> Bool {
        let decoded = HTTPSyntax.asciiLowercased(HTTPRequestHead.percentDecode(Substring(name).utf8))
        return secretNames.contains(decoded) || decoded.contains("token") || decoded.contains("password")
    }

    /// `url` (a full URL, or a request target such as `/path?a=1`) with the value of every secret
    /// query item and any user-info password replaced by ``placeholder``. Everything else
    /// (order and encoding of the other items, the fragment) is kept as written.
    public static func redacting(_ url: String) -> String {
        let unredacted = redactingPassword(url)
        guard let question = unredacted.firstIndex(of: "?") else { return unredacted }
        let start = unredacted.index(after: question)
        let end = unredacted[start...].firstIndex(of: "#") ?? unredacted.endIndex
        let items: [String] = unredacted[start..<end].split(separator: "&", omittingEmptySubsequences: false).map { item in
            guard let equals = item.firstIndex(of: "="), isSecretQueryName(String(item[..<equals])) else {
                return String(item)
            }
            return String(item[...equals]) + placeholder
        }
        return String(unredacted[...question]) + items.joined(separator: "&") + String(unredacted[end...])
    }

    /// `text`, a URL as given that failed to parse, for an error message: as ``redacting(_:)``,
    /// and with everything from the first `:` after `scheme://` up to the last `@` hidden.
    ///
    /// A password whose `/`, `?`, `#` or `@` was not percent-encoded ends the authority early for
    /// a URL parser (and for ``redacting(_:)``), so the rest of it would be shown as a path or a
    /// query. Text that did not parse cannot tell a password from a path, so this hides the
    /// longest span that may be one; it over-redacts an `@` in a path or query
    /// (`wss://h:443/users/@alice` shows as `wss://h:<redacted>@alice`), which an error message
    /// can afford and a log line of a parsed URL should not: use ``redacting(_:)`` for those.
    public static func redactingUnparsed(_ text: String) -> String {
        guard let start = authorityStart(text),
              let at = text[start...].lastIndex(of: "@"),
              let colon = text[start..<at].firstIndex(of: ":") else {
            return redacting(text)
        }
        return redacting(String(text[...colon]) + placeholder + String(text[at...]))
    }

    /// `scheme://user:password@host…` → `scheme://user:<redacted>@host…`.
    private static func redactingPassword(_ url: String) -> String {
        guard let authorityStart = authorityStart(url) else { return url }
        let authority = url[authorityStart...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard let at = authority.lastIndex(of: "@"),
              let colon = authority[..<at].firstIndex(of: ":") else { return url }
        return String(url[...colon]) + placeholder + String(url[at...])
    }

    /// Where the authority starts: after the first `://` that comes before any `/`, `?` or `#`.
    private static func authorityStart(_ url: String) -> String.Index? {
        let separator = "://"
        var i = url.startIndex
        while i < url.endIndex, url[i] != "/", url[i] != "?", url[i] != "#" {
            if url[i...].hasPrefix(separator) { return url.index(i, offsetBy: separator.count) }
            i = url.index(after: i)
        }
        return nil
    }
}
