"""Write formats.jsonl and benign.jsonl: the secret-format corpus of tests/test_secrets_corpus.py.

Synthetic, written for dyna: every value is random characters (random.Random(20261206)) in
the shape the provider documents (prefix, length, alphabet, checksum where one exists). None
is a real credential. Card numbers are issuers' published test numbers, SSNs the known invalid
ones, phone numbers 555 numbers, e-mail domains example.com (RFC 2606). Run from the repository
root: ``python tests/data/secrets/make_corpus.py``.
"""

import base64
import json
import random
import string
from pathlib import Path

R = random.Random(20261206)
HERE = Path(__file__).parent
AN = string.ascii_letters + string.digits
UP = string.ascii_uppercase + string.digits
LO = string.ascii_lowercase + string.digits
HX = "0123456789abcdef"
B64 = AN + "+/"
URL = AN + "-_"
B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
BECH = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def r(alphabet, n):
    return "".join(R.choice(alphabet) for _ in range(n))


def digits(n):
    return str(R.randint(1, 9)) + r(string.digits, n - 1)


def iban(country, bban):
    num = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(num) % 97:02d}{bban}"


def jwt():
    enc = lambda o: base64.urlsafe_b64encode(json.dumps(o).encode()).decode().rstrip("=")
    return (enc({"alg": "HS256", "typ": "JWT"}) + "." + enc({"sub": digits(10), "iat": 1700000000})
            + "." + r(URL, 43))


def pem(label, n=4):
    body = "\\n".join(r(B64, 64) for _ in range(n))
    return f"-----BEGIN {label}-----\\n{body}\\n-----END {label}-----"


F = []


def add(fid, provider, shape, text, secret=None):
    F.append({"id": fid, "provider": provider, "shape": shape, "text": text,
              "secret": text if secret is None else secret})


def bare(fid, provider, shape, value):
    add(fid, provider, shape, value)


def cue(fid, provider, shape, template, value):
    add(fid, provider, shape, template.format(value), value)


bare("aws_access_key_id", "AWS", "AKIA + 16 [A-Z2-7]", "AKIA" + r(B32, 16))
bare("aws_temporary_key_id", "AWS", "ASIA + 16 [A-Z2-7]", "ASIA" + r(B32, 16))
cue("aws_secret_access_key", "AWS", "40 base64 after AWS_SECRET_ACCESS_KEY=",
    "AWS_SECRET_ACCESS_KEY={}", r(B64, 40))
cue("aws_session_token", "AWS", "FwoGZXIvYXdzE + base64 after aws_session_token =",
    "aws_session_token = {}", "FwoGZXIvYXdzE" + r(B64, 200))
for p, what in (("ghp", "classic PAT"), ("gho", "OAuth"), ("ghu", "user-to-server"),
                ("ghs", "server-to-server"), ("ghr", "refresh")):
    bare(f"github_{p}", "GitHub", f"{p}_ + 36 alnum ({what})", f"{p}_" + r(AN, 36))
bare("github_fine_grained", "GitHub", "github_pat_ + 22 + _ + 59",
     "github_pat_" + r(AN, 22) + "_" + r(AN, 59))
bare("gitlab_pat", "GitLab", "glpat- + 20 [A-Za-z0-9_-]", "glpat-" + r(URL, 20))
bare("gitlab_trigger", "GitLab", "glptt- + 40 hex", "glptt-" + r(HX, 40))
bare("gitlab_runner", "GitLab", "glrt- + 20", "glrt-" + r(URL, 20))
bare("gitlab_deploy", "GitLab", "gldt- + 20", "gldt-" + r(URL, 20))
bare("gitlab_feed", "GitLab", "glft- + 20", "glft-" + r(URL, 20))
bare("slack_bot", "Slack", "xoxb-digits-digits-24", f"xoxb-{digits(12)}-{digits(13)}-{r(AN, 24)}")
bare("slack_user", "Slack", "xoxp-digits-digits-digits-32 hex",
     f"xoxp-{digits(12)}-{digits(12)}-{digits(13)}-{r(HX, 32)}")
bare("slack_app", "Slack", "xapp-1-A + 10-13 digits-64 hex",
     f"xapp-1-A{r(UP, 10)}-{digits(13)}-{r(HX, 64)}")
bare("slack_config", "Slack", "xoxe.xoxp-1- + 146", "xoxe.xoxp-1-" + r(AN, 146))
bare("slack_webhook", "Slack", "hooks.slack.com/services/T../B../24",
     f"https://hooks.slack.com/services/T{r(UP, 8)}/B{r(UP, 10)}/{r(AN, 24)}")
bare("stripe_secret", "Stripe", "sk_live_ + 24-99", "sk_live_" + r(AN, 24))
bare("stripe_restricted", "Stripe", "rk_live_ + 24-99", "rk_live_" + r(AN, 24))
bare("stripe_test_secret", "Stripe", "sk_test_ + 24-99", "sk_test_" + r(AN, 99))
bare("stripe_webhook", "Stripe", "whsec_ + 32 alnum", "whsec_" + r(AN, 32))
for p in ("shpat", "shpss", "shpca", "shppa"):
    bare(f"shopify_{p}", "Shopify", f"{p}_ + 32 hex", f"{p}_" + r(HX, 32))
for p in ("dop", "doo", "dor"):
    bare(f"digitalocean_{p}", "DigitalOcean", f"{p}_v1_ + 64 hex", f"{p}_v1_" + r(HX, 64))
bare("databricks", "Databricks", "dapi + 32 hex", "dapi" + r(HX, 32))
bare("atlassian", "Atlassian", "ATATT3 + 186 [A-Za-z0-9_=-] + 8 hex",
     "ATATT3xFfGF0" + r(URL, 180) + "=" + r(HX, 8).upper())
bare("groq", "Groq", "gsk_ + 52 alnum", "gsk_" + r(AN, 52))
bare("age_secret_key", "age", "AGE-SECRET-KEY-1 + 58 bech32", "AGE-SECRET-KEY-1" + r(BECH, 58))
bare("mailgun_new", "Mailgun", "32 hex - 8 hex - 8 hex",
     f"{r(HX, 32)}-{r(HX, 8)}-{r(HX, 8)}")
bare("mailgun_legacy", "Mailgun", "key- + 32 hex", "key-" + r(HX, 32))
bare("mailgun_pubkey", "Mailgun", "pubkey- + 32 hex", "pubkey-" + r(HX, 32))
bare("iban_de", "IBAN (ISO 13616)", "DE + 2 check + 18 digits, mod 97",
     iban("DE", r(string.digits, 18)))
bare("iban_gb", "IBAN (ISO 13616)", "GB + 2 check + 4 letters + 14 digits, mod 97",
     iban("GB", r(string.ascii_uppercase, 4) + r(string.digits, 14)))
bare("iban_fr_spaced", "IBAN (ISO 13616)", "FR IBAN written in groups of 4",
     " ".join((lambda s: [s[i:i + 4] for i in range(0, len(s), 4)])(
         iban("FR", r(string.digits, 23)))))
cue("docker_config_auth", "Docker", 'base64(user:pass) under "auth" in config.json',
    '{{"auths": {{"registry.example.com": {{"auth": "{}"}}}}}}',
    base64.b64encode(b"deploy:" + r(AN, 16).encode()).decode())
cue("sshpass", "sshpass", "sshpass -p <password>", "sshpass -p '{}' ssh ops@10.0.0.5",
    r(AN, 14))
cue("pw_colon", "generic", "pw: <password>", "pw: {}", r(AN, 12))
cue("prose_password_no_digit", "generic", "password in prose, letters only",
    "the new password is {} so do not share it", "TangerineFalconOrbit")
cue("prose_passphrase", "generic", "passphrase in prose",
    "Use the passphrase {} to unlock the vault", "correct-horse-battery-staple")
bare("openai_project", "OpenAI", "sk-proj- + 156 [A-Za-z0-9_-]", "sk-proj-" + r(URL, 156))
bare("openai_legacy", "OpenAI", "sk- + 20 + T3BlbkFJ + 20",
     "sk-" + r(AN, 20) + "T3BlbkFJ" + r(AN, 20))
bare("openai_svcacct", "OpenAI", "sk-svcacct- + 156", "sk-svcacct-" + r(URL, 156))
bare("openai_admin", "OpenAI", "sk-admin- + 156", "sk-admin-" + r(URL, 156))
bare("anthropic_api", "Anthropic", "sk-ant-api03- + 93 + AA", "sk-ant-api03-" + r(URL, 93) + "AA")
bare("anthropic_admin", "Anthropic", "sk-ant-admin01- + 93 + AA",
     "sk-ant-admin01-" + r(URL, 93) + "AA")
bare("google_api_key", "Google", "AIza + 35", "AIza" + r(URL, 35))
bare("google_oauth_secret", "Google", "GOCSPX- + 28", "GOCSPX-" + r(URL, 28))
bare("google_oauth_token", "Google", "ya29. + 100+", "ya29." + r(URL, 120))
cue("gcp_service_account", "Google Cloud", "private_key in a service-account JSON",
    '{{"type": "service_account", "private_key": "{}"}}', pem("PRIVATE KEY", 3))
bare("twilio_api_key", "Twilio", "SK + 32 hex", "SK" + r(HX, 32))
cue("twilio_auth_token", "Twilio", "32 hex after TWILIO_AUTH_TOKEN=", "TWILIO_AUTH_TOKEN={}",
    r(HX, 32))
bare("sendgrid", "SendGrid", "SG. + 22 + . + 43", "SG." + r(URL, 22) + "." + r(URL, 43))
bare("npm", "npm", "npm_ + 36", "npm_" + r(AN, 36))
bare("pypi", "PyPI", "pypi-AgEIcHlwaS5vcmc + 70+", "pypi-AgEIcHlwaS5vcmc" + r(URL, 120))
bare("pypi_test", "TestPyPI", "pypi-AgENdGVzdC5weXBpLm9yZw + 70+",
     "pypi-AgENdGVzdC5weXBpLm9yZw" + r(URL, 120))
bare("jwt", "JWT (RFC 7519)", "eyJ header . eyJ payload . signature", jwt())
for label, fid in (("RSA PRIVATE KEY", "pem_rsa"), ("EC PRIVATE KEY", "pem_ec"),
                   ("OPENSSH PRIVATE KEY", "pem_openssh"), ("PRIVATE KEY", "pem_pkcs8"),
                   ("ENCRYPTED PRIVATE KEY", "pem_pkcs8_encrypted"),
                   ("DSA PRIVATE KEY", "pem_dsa"), ("PGP PRIVATE KEY BLOCK", "pgp_private")):
    bare(fid, "PEM / OpenPGP", f"-----BEGIN {label}-----", pem(label))
bare("huggingface", "Hugging Face", "hf_ + 34 letters", "hf_" + r(string.ascii_letters, 34))
cue("azure_storage_conn", "Azure", "AccountKey= 86 base64 + ==",
    "DefaultEndpointsProtocol=https;AccountName=dynalogs;AccountKey={};EndpointSuffix=core"
    ".windows.net", r(B64, 86) + "==")
cue("azure_sas", "Azure", "sig= in a SAS URL",
    "https://dynalogs.blob.core.windows.net/c/x.json?sv=2022-11-02&sp=r&sig={}",
    r(AN, 43) + "%3D")
cue("azure_openai_key", "Azure OpenAI", "32 hex after AZURE_OPENAI_API_KEY=",
    "AZURE_OPENAI_API_KEY={}", r(HX, 32))
cue("azure_ad_client_secret", "Azure AD", "3 + 5 + Q~ + 31", "AZURE_CLIENT_SECRET={}",
    r(AN, 3) + "8Q~" + r(URL, 34))
cue("heroku", "Heroku", "UUID after HEROKU_API_KEY=", "HEROKU_API_KEY={}",
    "-".join(r(HX, n) for n in (8, 4, 4, 4, 12)))
bare("heroku_new", "Heroku", "HRKU- + 60", "HRKU-" + r(URL, 60))
bare("mailchimp", "Mailchimp", "32 hex + -us + 1-2 digits", r(HX, 32) + "-us" + digits(2))
bare("square_access", "Square", "EAAA + 60", "EAAA" + r(URL, 60))
bare("square_oauth_secret", "Square", "sq0csp- + 43", "sq0csp-" + r(URL, 43))
bare("square_legacy_access", "Square", "sq0atp- + 22", "sq0atp-" + r(URL, 22))
bare("braintree", "PayPal Braintree", "access_token$production$16$32",
     f"access_token$production${r(LO, 16)}${r(HX, 32)}")
bare("discord_bot", "Discord", "24 . 6 . 27", r("MN", 1) + r(AN, 23) + "." + r(URL, 6) + "."
     + r(URL, 27))
bare("discord_webhook", "Discord", "discord.com/api/webhooks/<id>/<68>",
     f"https://discord.com/api/webhooks/{digits(18)}/{r(URL, 68)}")
bare("telegram_bot", "Telegram", "8-10 digits : AA + 33", f"{digits(10)}:AA{r(URL, 33)}")
bare("teams_webhook", "Microsoft Teams", "webhook.office.com/webhookb2/...",
     f"https://acme.webhook.office.com/webhookb2/{r(HX, 8)}-{r(HX, 4)}-{r(HX, 4)}-{r(HX, 4)}-"
     f"{r(HX, 12)}@{r(HX, 8)}/IncomingWebhook/{r(HX, 32)}/{r(HX, 8)}")
bare("newrelic_user", "New Relic", "NRAK- + 27 [A-Z0-9]", "NRAK-" + r(UP, 27))
bare("newrelic_insert", "New Relic", "NRII- + 32", "NRII-" + r(URL, 32))
bare("newrelic_license", "New Relic", "36 hex + NRAL", r(HX, 36) + "NRAL")
cue("datadog_api", "Datadog", "32 hex after DD_API_KEY=", "DD_API_KEY={}", r(HX, 32))
cue("datadog_app", "Datadog", "40 hex after DD_APP_KEY=", "DD_APP_KEY={}", r(HX, 40))
cue("sentry_dsn", "Sentry", "https://<32 hex>@oN.ingest.sentry.io/N",
    "https://{}@o" + digits(6) + ".ingest.sentry.io/" + digits(7), r(HX, 32))
bare("sentry_org_token", "Sentry", "sntrys_ + eyJ base64", "sntrys_eyJ" + r(AN, 120))
bare("sentry_user_token", "Sentry", "sntryu_ + 64 hex", "sntryu_" + r(HX, 64))
bare("linear", "Linear", "lin_api_ + 40", "lin_api_" + r(AN, 40))
bare("notion_legacy", "Notion", "secret_ + 43", "secret_" + r(AN, 43))
bare("notion", "Notion", "ntn_ + 46", "ntn_" + r(AN, 46))
bare("airtable", "Airtable", "pat + 14 . 64 hex", "pat" + r(AN, 14) + "." + r(HX, 64))
bare("postman", "Postman", "PMAK- + 24 hex - 34 hex", f"PMAK-{r(HX, 24)}-{r(HX, 34)}")
bare("doppler", "Doppler", "dp.pt. + 43", "dp.pt." + r(AN, 43))
bare("pulumi", "Pulumi", "pul- + 40 hex", "pul-" + r(HX, 40))
bare("terraform_cloud", "HashiCorp Terraform", "14 . atlasv1 . 67",
     r(AN, 14) + ".atlasv1." + r(URL, 67))
bare("vault_service", "HashiCorp Vault", "hvs. + 90+", "hvs." + r(URL, 92))
bare("vault_batch", "HashiCorp Vault", "hvb. + 138+", "hvb." + r(URL, 140))
bare("onepassword_service", "1Password", "ops_eyJ + 250+", "ops_eyJ" + r(AN, 250))
bare("flyio", "Fly.io", "fo1_ + 43", "fo1_" + r(URL, 43))
bare("netlify", "Netlify", "nfp_ + 36", "nfp_" + r(AN, 36))
bare("supabase", "Supabase", "sbp_ + 40 hex", "sbp_" + r(HX, 40))
bare("planetscale_token", "PlanetScale", "pscale_tkn_ + 43", "pscale_tkn_" + r(URL, 43))
bare("planetscale_password", "PlanetScale", "pscale_pw_ + 43", "pscale_pw_" + r(URL, 43))
cue("cloudflare_api_token", "Cloudflare", "40 after CLOUDFLARE_API_TOKEN=",
    "CLOUDFLARE_API_TOKEN={}", r(URL, 40))
bare("cloudflare_origin_ca", "Cloudflare", "v1.0- + 24 hex - 146 hex",
     f"v1.0-{r(HX, 24)}-{r(HX, 146)}")
bare("mapbox", "Mapbox", "sk.eyJ + 60 . 22", "sk.eyJ" + r(AN, 60) + "." + r(URL, 22))
bare("contentful", "Contentful", "CFPAT- + 43", "CFPAT-" + r(URL, 43))
bare("dynatrace", "Dynatrace", "dt0c01. + 24 . 64", f"dt0c01.{r(UP, 24)}.{r(UP, 64)}")
bare("grafana_cloud", "Grafana", "glc_eyJ + 80", "glc_eyJ" + r(AN, 80))
bare("grafana_service_account", "Grafana", "glsa_ + 32 _ 8 hex",
     f"glsa_{r(AN, 32)}_{r(HX, 8)}")
cue("okta", "Okta", "00 + 40 after Authorization: SSWS", "Authorization: SSWS {}",
    "00" + r(URL, 40))
bare("replicate", "Replicate", "r8_ + 37", "r8_" + r(AN, 37))
bare("perplexity", "Perplexity", "pplx- + 48", "pplx-" + r(AN, 48))
bare("xai", "xAI", "xai- + 80", "xai-" + r(AN, 80))
bare("openrouter", "OpenRouter", "sk-or-v1- + 64 hex", "sk-or-v1-" + r(HX, 64))
bare("deepseek", "DeepSeek", "sk- + 32 hex", "sk-" + r(HX, 32))
cue("mistral", "Mistral", "32 alnum after MISTRAL_API_KEY=", "MISTRAL_API_KEY={}", r(AN, 32))
cue("cohere", "Cohere", "40 alnum after CO_API_KEY=", "CO_API_KEY={}", r(AN, 40))
bare("langsmith", "LangSmith", "lsv2_pt_ + 32 hex _ 10 hex", f"lsv2_pt_{r(HX, 32)}_{r(HX, 10)}")
bare("dropbox", "Dropbox", "sl. + 135", "sl." + r(URL, 135))
bare("facebook", "Meta", "EAA + 100+", "EAACEdEose0cBA" + r(AN, 100))
bare("figma", "Figma", "figd_ + 40", "figd_" + r(URL, 40))
bare("rubygems", "RubyGems", "rubygems_ + 48 hex", "rubygems_" + r(HX, 48))
bare("nuget", "NuGet", "oy2 + 43 lower", "oy2" + r(LO, 43))
bare("dockerhub", "Docker Hub", "dckr_pat_ + 27", "dckr_pat_" + r(URL, 27))
bare("jfrog", "JFrog", "AKCp + 69", "AKCp" + r(AN, 69))
bare("shippo", "Shippo", "shippo_live_ + 40 hex", "shippo_live_" + r(HX, 40))
bare("easypost", "EasyPost", "EZAK + 54", "EZAK" + r(AN, 54))
bare("flutterwave", "Flutterwave", "FLWSECK- + 32 hex + -X", f"FLWSECK-{r(HX, 32)}-X")
bare("razorpay", "Razorpay", "rzp_live_ + 14", "rzp_live_" + r(AN, 14))
bare("brevo", "Brevo (Sendinblue)", "xkeysib- + 64 hex - 16", f"xkeysib-{r(HX, 64)}-{r(AN, 16)}")
cue("algolia_admin", "Algolia", "32 hex after ALGOLIA_ADMIN_KEY=", "ALGOLIA_ADMIN_KEY={}",
    r(HX, 32))
bare("ethereum_private_key", "Ethereum", "PRIVATE_KEY=0x + 64 hex", "PRIVATE_KEY=0x" + r(HX, 64))
bare("bitcoin_wif", "Bitcoin", "5[HJK] + 49 base58 (WIF)",
     "5K" + r("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", 49))
cue("url_https_password", "URL (RFC 3986)", "https://user:password@host",
    "https://admin:{}@git.example.com/repo.git", r(AN, 16))
cue("url_postgres", "PostgreSQL", "postgresql://user:password@host/db",
    "postgresql://dyna:{}@db.internal:5432/runs", r(AN, 18))
cue("url_git_token", "GitHub", "https://x-access-token:<token>@github.com",
    "https://x-access-token:{}@github.com/acme/app.git", "ghs_" + r(AN, 36))
cue("bearer", "HTTP (RFC 6750)", "Authorization: Bearer <token>", "Authorization: Bearer {}",
    r(URL, 40))
cue("basic", "HTTP (RFC 7617)", "Authorization: Basic base64(user:pass)",
    "Authorization: Basic {}", base64.b64encode(b"ops:" + r(AN, 12).encode()).decode())
cue("cookie", "HTTP (RFC 6265)", "Cookie: session=<value>", "Cookie: session={}", r(AN, 32))
cue("netrc", "netrc", "machine host login u password p",
    "machine api.example.com login dyna password {}", r(AN, 14))
cue("mysql_cli", "MySQL", "mysql -p<password>", "mysql -u root -p{} runs", r(AN, 12))
cue("curl_user", "curl", "curl -u user:password", "curl -u admin:{} https://api.example.com",
    r(AN, 14))
cue("sql_identified_by", "SQL", "IDENTIFIED BY '<password>'",
    "CREATE USER dyna IDENTIFIED BY '{}';", r(AN, 14))
cue("htpasswd", "Apache", "user:$apr1$salt$hash", "ops:{}",
    "$apr1$" + r(AN, 8) + "$" + r(AN + "./", 22))
cue("k8s_secret", "Kubernetes", "base64 under data: password:",
    "kind: Secret\\ndata:\\n  password: {}", base64.b64encode(r(AN, 18).encode()).decode())
cue("django_secret", "Django", "50 chars after SECRET_KEY =", "SECRET_KEY = '{}'",
    r(AN + "!@#%^&*(-_=+)", 50))
cue("generic_api_key_env", "generic", "API_KEY=<32+>", "API_KEY={}", r(AN, 32))
cue("generic_client_secret", "generic", "client_secret: <value>", "client_secret: {}",
    r(URL, 40))
bare("card_visa", "Visa", "16 digits, Luhn, IIN 4", "4111 1111 1111 1111")
bare("card_mastercard", "Mastercard", "16 digits, Luhn, IIN 51-55/2221-2720", "5555555555554444")
bare("card_amex", "American Express", "15 digits, Luhn, IIN 34/37", "3782-822463-10005")
bare("us_ssn", "US SSA", "AAA-GG-SSSS", "078-05-1120")
bare("phone_us", "NANP", "+1 (NPA) 555-01XX", "+1 (212) 555-0147")
bare("email", "RFC 5322", "local@domain", "mia.li@example.com")
cue("dob", "generic", "date after DOB:", "DOB: {}", "1990-04-05")
cue("ssh_password_prose", "generic", "the ssh password is <word>",
    "ssh into the box, the root password is {}", "marmalade")
cue("password_colon_no_digit", "generic", "Password: <letters>", "Password: {}",
    "PurpleElephantDance")
cue("passwd_arg", "generic", "--password <value>", "deploy --user ops --password {}",
    r(AN, 12))
bare("adafruit_io", "Adafruit IO", "aio_ + 28", "aio_" + r(AN, 28))
bare("alibaba", "Alibaba Cloud", "LTAI + 20", "LTAI" + r(AN, 20))
cue("ibm_cloud", "IBM Cloud", "44 after IBMCLOUD_API_KEY=", "IBMCLOUD_API_KEY={}", r(URL, 44))
bare("asana", "Asana", "1/ + 16 digits : 32 hex", f"1/{digits(16)}:{r(HX, 32)}")
bare("frameio", "Frame.io", "fio-u- + 64", "fio-u-" + r(URL, 64))
bare("prefect", "Prefect", "pnu_ + 36", "pnu_" + r(AN, 36))
bare("readme", "ReadMe", "rdme_ + 70", "rdme_" + r(LO, 70))
bare("scalingo", "Scalingo", "tk-us- + 48", "tk-us-" + r(URL, 48))
bare("typeform", "Typeform", "tfp_ + 59", "tfp_" + r(URL, 59))
bare("yandex", "Yandex", "y0_ + 55", "y0_" + r(URL, 55))
bare("clojars", "Clojars", "CLOJARS_ + 60 hex", "CLOJARS_" + r(HX, 60))
bare("defined_networking", "Defined Networking", "dnkey- + 26 - 52",
     f"dnkey-{r(UP, 26)}-{r(UP, 52)}")
bare("harness", "Harness", "pat.22.24.20", f"pat.{r(URL, 22)}.{r(HX, 24)}.{r(AN, 20)}")
bare("octopus", "Octopus Deploy", "API- + 26", "API-" + r(UP, 26))
bare("sourcegraph", "Sourcegraph", "sgp_ + 40 hex", "sgp_" + r(HX, 40))
bare("infracost", "Infracost", "ico- + 32", "ico-" + r(AN, 32))

EXTRA = {"card_visa": 4111111111111111, "card_mastercard": 5555555555554444,
         "us_ssn": 78051120, "phone_us": 12125550147}

B = []


def benign(bid, kind, text, key=None):
    row = {"id": bid, "kind": kind, "text": text}
    if key is not None:
        row["key"] = key
    B.append(row)


for i in range(6):
    benign(f"git_sha_{i}", "git commit SHA (40 hex)", r(HX, 40))
benign("git_sha_prose", "git commit SHA in prose", f"merged {r(HX, 40)} into main")
benign("git_short_sha", "short SHA", f"revert {r(HX, 7)}")
for i in range(4):
    benign(f"sha256_{i}", "sha256 digest", r(HX, 64))
benign("docker_digest", "image digest", "python@sha256:" + r(HX, 64))
benign("md5", "md5 digest", r(HX, 32))
for i in range(4):
    benign(f"uuid_{i}", "UUID", "-".join(r(HX, n) for n in (8, 4, 4, 4, 12)))
for i in range(4):
    benign(f"request_id_{i}", "40-char request id", "req_" + r(LO, 36))
benign("request_id_hex", "40-hex request id under a cue",
       f"X-Request-Id: {r(HX, 40)}")
benign("trace_id", "W3C traceparent", f"00-{r(HX, 32)}-{r(HX, 16)}-01")


def luhn_number(prefix, n):
    body = prefix + r(string.digits, n - len(prefix) - 1)
    for d in string.digits:
        s = body + d
        tot = sum(int(c) if i % 2 == 0 else sum(divmod(int(c) * 2, 10))
                  for i, c in enumerate(reversed(s)))
        if tot % 10 == 0:
            return s


for i, prefix in enumerate(("1", "9", "8", "0")):
    benign(f"order_number_{i}", "Luhn-valid order number outside card issuer ranges",
           f"order #{luhn_number(prefix, 16)} shipped")
benign("order_number_issuer_range", "Luhn-valid order number in a card issuer range, after "
       "'order #'", "order #4111111111111111 shipped")
benign("invoice_number_issuer_range", "Luhn-valid invoice number in an issuer range",
       "invoice no. 5555555555554444 paid")
benign("request_id_mixed", "40-char mixed-case request id after an id header",
       "X-Request-Id: " + r(AN, 40))
benign("order_number_bare", "Luhn-valid 16-digit id outside issuer ranges", luhn_number("9", 16))
for text in ("sk-learn-compatible-wrapper2024", "scikit-learn==1.5.2", "pydantic-settings",
             "sk-learn", "python-dotenv", "detect-secrets", "keyring", "passlib[bcrypt]",
             "tokenizers>=0.19", "secretstorage", "pyjwt", "ghp-import"):
    benign("library_" + text.replace("-", "_")[:20], "library name", text)
for text in ("The Cookie: header is set by the browser",
             "Set the password in the environment, never in the repository.",
             "Passwords must contain at least 12 characters.",
             "If you forgot your password, click Reset.",
             "The token bucket refills every second.",
             "Authorization: header missing, request refused",
             "Rotate the API key every 90 days.",
             "AWS_SECRET_ACCESS_KEY is read from the environment",
             "tokens start with a provider prefix such as xoxb-",
             "The secret to a good sourdough is patience.",
             "Use a password manager and turn on two-factor login.",
             "the pin of the map marks the depot",
             "key: value pairs are stored in order",
             "passport control opens at 6am",
             "The IBAN field is optional for domestic transfers.",
             "sshpass is not installed on this host",
             "call 555 if you need a taxi",
             "we shipped 4111 parcels this year",
             "version 2.13.1 released on 2024-05-01",
             "max_tokens_2048 reached",
             "keyboard layout: us",
             "monkey patching the tokenizer"):
    benign("prose_" + "_".join(text.lower().split()[:3]).strip(":.,")[:30], "prose", text)
for key, text in (("monkey", "banana"), ("author", "Ada Lovelace"), ("pinned", "yes"),
                  ("passenger_count", "3"), ("tokenizer", "gpt2"), ("keyboard", "qwerty"),
                  ("secretary", "Bob"), ("cwd", "/home/dyna/runs"), ("spin", "up"),
                  ("authority", "ca.example.com"), ("keynote", "opening talk"),
                  ("compass", "north"), ("opinion", "fine"), ("turnkey", "yes")):
    benign("under_key_" + key, "harmless value under a key containing a secret word", text, key)
benign("isbn", "ISBN-13", "978-3-16-148410-0")
benign("semver", "version", "v1.24.3-rc.1")
benign("timestamp", "ISO timestamp", "2024-05-01T12:00:00Z")
benign("path", "file path", "/var/lib/dyna/store/episodes.db")
benign("base64_prose", "base64 of English prose", base64.b64encode(
    b"The quick brown fox jumps over the lazy dog").decode())
benign("flight", "flight number", "HAT170")
benign("reservation", "reservation id", "ZFA04Y")
benign("css_colour", "CSS colour", "#1a2b3c")
benign("number_seq", "16 digits that fail Luhn", "1234567890123456")

# Passwords the words around them name (dyna/redact/passwords.py): fixed values, written by
# hand (no draw from R, so every row above keeps its value).
for fid, shape, text, secret in (
        ("prose_password_is_word", "password is <one word>", "my password is hunter", "hunter"),
        ("prose_password_for_the_db", "password for <words> is <one word>",
         "the password for the db is swordfish", "swordfish"),
        ("prose_passphrase_colon_word", "passphrase: <one word>", "use passphrase: correcthorse",
         "correcthorse"),
        ("prose_pwd_was_word", "pwd was <one word>.", "the wifi pwd was lemonade.", "lemonade"),
        ("prose_password_colon_word", "<words> password: <one word>", "DB password: quokka",
         "quokka"),
        ("prose_passcode_capitalised", "passcode is <Word>,",
         "the door passcode is Nightingale, keep it safe", "Nightingale"),
        ("prose_password_quoted_word", "password is '<word>'",
         "the password is 'wombat' for now", "wombat"),
        ("prose_pw_is_word_and", "pw is <one word> and ...",
         "the admin pw is gingerbread and the user is ops", "gingerbread"),
        ("key_db_pw", "DB_PW=<value>", "DB_PW=s3cr3tvalue", "s3cr3tvalue"),
        ("key_mysql_pw_word", "MYSQL_PW=<word> <command>", "MYSQL_PW=bluebird ./deploy.sh",
         "bluebird"),
        ("key_db_pw_kebab", "db-pw: <value>", "db-pw: Xk9#mQ2$vLr", "Xk9#mQ2$vLr"),
        ("key_dbpw_camel", "dbPw=<value>", "dbPw=Qz7-Lp3-Wm8", "Qz7-Lp3-Wm8"),
        ("key_pw_json", '"pw": "<value>" in JSON', '{"pw": "gT5vR8nB2kW"}', "gT5vR8nB2kW"),
        ("key_pw_json_word", '"pw": "<word>" in JSON', '{"pw": "hedgehog"}', "hedgehog"),
        ("key_redis_pass", "redis_pass=<value>", "redis_pass=Rd!s-8842-kq", "Rd!s-8842-kq"),
        ("key_smtp_passwd_camel", "smtpPasswd: '<word>'", "smtpPasswd: 'mailroom'",
         "mailroom"),
        ("key_ftp_pwd_kebab", "ftp-pwd = <value>", "ftp-pwd = 7Gh2kLp9Qx", "7Gh2kLp9Qx"),
        ("key_db_pwd_word", "DB_PWD=<word>", "DB_PWD=marigold", "marigold"),
        ("key_password_prod", "PASSWORD_PROD=<value>", "PASSWORD_PROD=Vx8kq2LmZ4",
         "Vx8kq2LmZ4"),
        ("key_pw_admin_word", "pw_admin: <word>", "pw_admin: turquoise", "turquoise"),
        ("key_password2", "password2=<value>", "password2=Ab3dEf6hJk", "Ab3dEf6hJk"),
        ("key_db_pass_old_flag", "--db-pass-old=<value>", "--db-pass-old=Mx4tR7wQ2z",
         "Mx4tR7wQ2z"),
        ("key_dbpass_json_camel", '"dbPass": "<value>" in JSON', '{"dbPass": "N0v3mb3r!Rain"}',
         "N0v3mb3r!Rain"),
        ("key_smtp_pass_upper", "SMTP_PASS=<value>", "SMTP_PASS=Plk2-Qw9x-Zr4v",
         "Plk2-Qw9x-Zr4v"),
        ("key_redis_passwd_base64", "REDIS_PASSWD=<base64>", "REDIS_PASSWD=cGxhbnQ5LWF6dXJl",
         "cGxhbnQ5LWF6dXJl"),
        ("key_api_pw_spaces", 'api-pw="<words with spaces>"', 'api-pw="k9 f3 x7 q2"',
         "k9 f3 x7 q2")):
    add(fid, "generic", shape, text, secret)
for text in ("the password is required", "the password field is empty",
             "password is incorrect", "passwords are hashed", "the password reset link",
             "the password is stored in the vault", "Password: required",
             "the password is valid until Friday", "the password is mandatory for admins",
             "your password is too short", "the password is never logged",
             "the password is shared with the team", "the password is case-sensitive",
             "Error: password: must be 12 characters", "the wifi password is below.",
             "pw is empty", "the password is different for each host", "bypass=true",
             "compass: north", "passenger_count=3", "password_length=16", "pass_rate=0.93",
             "PWD=/home/user", "pwd: /home/dyna/runs", "password_policy: strict",
             "pass_1: 0.42"):
    benign("password_words_" + "_".join(text.lower().replace(":", " ").split()[:4])[:40],
           "prose or a key that holds a password word", text)
for key, text in (("bypass", "true"), ("PWD", "/home/user"), ("password_length", "16"),
                  ("pass_rate", "0.93"), ("pass_1", "0.42"), ("password_policy", "strict")):
    benign("under_key_" + key, "harmless value under a key holding a password word", text, key)

ids = [f["id"] for f in F]
assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
bids = [b["id"] for b in B]
assert len(bids) == len(set(bids)), [i for i in bids if bids.count(i) > 1]
for f in F:
    if f["id"] in EXTRA:
        f["int"] = EXTRA[f["id"]]
(HERE / "formats.jsonl").write_text("".join(json.dumps(f) + "\n" for f in F), encoding="utf-8")
(HERE / "benign.jsonl").write_text("".join(json.dumps(b) + "\n" for b in B), encoding="utf-8")
print(len(F), "formats,", len(B), "benign")
