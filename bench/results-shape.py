import json,sys,re
d=sys.argv[1]
def keys(o,p=''):
    out=set()
    if isinstance(o,dict):
        for k,v in o.items(): out|=keys(v,p+'.'+k)
    elif isinstance(o,list):
        for v in o: out|=keys(v,p+'[]')
    else: out.add(p)
    return out
for k in sorted(keys(json.load(open(d+'/results.json')))): print('json',k)
for l in open(d+'/results.md'):
    l=l.rstrip()
    if l.startswith('#'): print(re.sub(r'[\d.]+','N',l))
    elif l.startswith('|'):
        cells=l.split('|')
        print('row', cells[1].strip() if not re.match(r'^[\d.–-]', cells[1].strip()) else 'N', len(cells))
    elif l: print('line', re.sub(r'[\d.]+','N',l))
