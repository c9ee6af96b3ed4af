"""Convert the genai-prices package's data into tokentap's price snapshot.

Run by scripts/refresh-prices.sh with a Python that has the pinned
`genai-prices` installed; writes JSON on stdout. Only the providers tokentap
meters are kept, and only the price keys tokentap can bill from the usage it
reads (tokens: text, cached, audio, reasoning); see docs/COST.md.
"""

import datetime
import json
import re
import sys
from decimal import Decimal
from importlib.metadata import version

from genai_prices import data
from genai_prices import types as t

# genai-prices provider ids tokentap maps a provider kind to (src/pricing/table.rs).
PROVIDERS = {
    'openai', 'anthropic', 'google', 'aws', 'azure', 'cohere', 'mistral', 'groq',
    'deepseek', 'openrouter', 'together', 'perplexity', 'x-ai',
}
# Price keys tokentap bills (per million tokens).
KEYS = [
    'input_mtok', 'output_mtok', 'cache_read_mtok', 'cache_write_mtok', 'cache_write_1h_mtok',
    'cache_write_5m_mtok', 'input_audio_mtok', 'cache_audio_read_mtok', 'output_audio_mtok',
    'output_reasoning_mtok',
]
# A whole-pattern negative lookahead, which Rust's `regex` lacks.
NOT_RE = re.compile(r'^\^\(\?!(.*)\)$')


def num(d):
    return float(d) if isinstance(d, Decimal) else d


def clause(m):
    if isinstance(m, t.ClauseEquals):
        return {'equals': m.equals.lower()}
    if isinstance(m, t.ClauseStartsWith):
        return {'starts_with': m.starts_with.lower()}
    if isinstance(m, t.ClauseEndsWith):
        return {'ends_with': m.ends_with.lower()}
    if isinstance(m, t.ClauseContains):
        return {'contains': m.contains.lower()}
    if isinstance(m, t.ClauseRegex):
        neg = NOT_RE.match(m.regex)
        if neg:
            return {'not': {'regex': '^' + neg.group(1)}}
        if '(?=' in m.regex or '(?!' in m.regex or '(?<' in m.regex:
            raise SystemExit(f'unsupported regex clause: {m.regex}')
        return {'regex': m.regex}
    if isinstance(m, t.ClauseOr):
        return {'or': [clause(x) for x in m.or_]}
    if isinstance(m, t.ClauseAnd):
        return {'and': [clause(x) for x in m.and_]}
    raise SystemExit(f'unknown match clause: {m!r}')


def price(v):
    if isinstance(v, t.TieredPrices):
        return {'base': num(v.base), 'tiers': [{'start': x.start, 'price': num(x.price)} for x in v.tiers]}
    return num(v)


def prices(mp):
    out = {}
    for k in KEYS:
        v = mp.__dict__.get(k)
        if v is not None:
            out[k] = price(v)
    return out


def constraint(c, out):
    if isinstance(c, t.StartDateConstraint):
        out['start'] = c.start_date.isoformat()
    elif isinstance(c, t.TimeOfDateConstraint):
        def hm(x):
            if x.tzinfo is not None:
                x = datetime.datetime.combine(datetime.date(1970, 1, 1), x).astimezone(datetime.UTC).time()
            return x.strftime('%H:%M')

        out['daily'] = [hm(c.start_time), hm(c.end_time)]
    elif c is not None:
        raise SystemExit(f'unknown constraint: {c!r}')
    return out


def model(m):
    ps = m.prices if isinstance(m.prices, list) else [t.ConditionalPrice(prices=m.prices)]
    out = {'id': m.id, 'match': clause(m.match)}
    if m.name:
        out['name'] = m.name
    out['prices'] = [constraint(c.constraint, {'prices': prices(c.prices)}) for c in ps]
    variants = []
    for v in m.price_variants or []:
        p = prices(v.prices)
        if p:
            variants.append(constraint(v.constraint, {'when': dict(v.when), 'prices': p}))
    if variants:
        out['variants'] = variants
    return out


def main():
    providers = []
    for p in data.providers:
        if p.id not in PROVIDERS:
            continue
        providers.append({
            'id': p.id,
            'name': p.name,
            'fallback': [f for f in (p.fallback_model_providers or []) if f in PROVIDERS],
            'models': [model(m) for m in p.models],
        })
    out = {
        'source': {
            'package': 'genai-prices',
            'version': version('genai-prices'),
            'license': 'MIT',
            'url': 'https://github.com/pydantic/genai-prices',
        },
        'providers': providers,
    }
    json.dump(out, sys.stdout, separators=(',', ':'), sort_keys=False)
    sys.stdout.write('\n')


main()
