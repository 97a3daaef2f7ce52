// featurepipe's map pages: the features on an OpenLayers map, the table of
// their properties, and, for callers who may write, the editor. The page
// uses the API as any client does (GeoJSON, OPTIONS, the schema, ETags).
// Values from the database only ever enter the page as text (textContent,
// input values), never as HTML.
(() => {
  'use strict';
  const mapElement = document.getElementById('map');
  if (!mapElement || typeof ol === 'undefined') return;

  const $ = (id) => document.getElementById(id);
  const TOKEN = 'featurepipe.token';
  const collectionUrl = mapElement.dataset.collection;
  const itemsUrl = collectionUrl + '/items';
  const itemUrl = (id) => itemsUrl + '/' + encodeURIComponent(id);
  // GeoJSON is longitude/latitude; the map shows Web Mercator.
  const geojson = new ol.format.GeoJSON({
    dataProjection: 'EPSG:4326',
    featureProjection: 'EPSG:3857',
  });

  // ---- The API --------------------------------------------------------

  /** A request with the key of this tab, if one was given. */
  function request(method, url, { body, type, etag, accept } = {}) {
    const headers = { Accept: accept || 'application/geo+json' };
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = 'Bearer ' + token;
    if (type) headers['Content-Type'] = type;
    if (etag) headers['If-Match'] = etag;
    if (method === 'POST' || method === 'PATCH') headers.Prefer = 'return=representation';
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) init.body = JSON.stringify(body);
    return fetch(url, init);
  }

  /** The problem document of a failed response (or one made up from its status). */
  async function problemOf(response) {
    try {
      return await response.json();
    } catch (_) {
      return { detail: response.status + ' ' + response.statusText };
    }
  }

  const status = (message) => { $('status').textContent = message; };

  // ---- The map and the table -----------------------------------------

  const source = new ol.source.Vector();
  const shape = (color, fill) => new ol.style.Style({
    image: new ol.style.Circle({
      radius: 6,
      fill: new ol.style.Fill({ color }),
      stroke: new ol.style.Stroke({ color: '#ffffff', width: 1.5 }),
    }),
    stroke: new ol.style.Stroke({ color, width: 2 }),
    fill: new ol.style.Fill({ color: fill }),
  });
  const vector = new ol.layer.Vector({
    source,
    style: shape('#1c5fb3', 'rgba(28, 95, 179, 0.25)'),
  });
  const layers = [vector];
  if (mapElement.dataset.basemap) {
    layers.unshift(new ol.layer.Tile({ source: new ol.source.XYZ({ url: mapElement.dataset.basemap }) }));
  }
  const map = new ol.Map({
    target: mapElement,
    layers,
    view: new ol.View({ center: [0, 0], zoom: 1 }),
  });
  // On click, not on OpenLayers' single click (which comes 250 ms later, and
  // so could land in the middle of what follows the click).
  const select = new ol.interaction.Select({
    condition: ol.events.condition.click,
    layers: [vector],
    style: shape('#e8890c', 'rgba(232, 137, 12, 0.3)'),
    hitTolerance: 4,
  });
  map.addInteraction(select);

  const tbody = document.querySelector('#features tbody');
  const columns = [...document.querySelectorAll('#features thead th')].slice(1).map((th) => th.textContent);
  const rowOf = (id) => [...tbody.rows].find((row) => row.dataset.id === String(id));

  /** A value as the table shows it: text as is, null as nothing, else JSON. */
  const text = (value) => (value === null || value === undefined ? ''
    : typeof value === 'string' ? value : JSON.stringify(value));

  /** A map feature of a GeoJSON one; the properties are kept apart from
   *  OpenLayers' own (a property may be called "geometry"). */
  function toFeature(object) {
    const feature = geojson.readFeature({ type: 'Feature', id: object.id, geometry: object.geometry, properties: null });
    feature.set('props', object.properties || {});
    return feature;
  }

  /** Show `feature`'s properties in its row, adding the row if it is new. */
  function showRow(feature) {
    const id = String(feature.getId());
    let row = rowOf(id);
    if (!row) {
      row = tbody.insertRow();
      row.dataset.id = id;
      row.tabIndex = 0;
      const cell = row.insertCell();
      cell.className = 'id';
      const link = document.createElement('a');
      link.href = itemUrl(id) + '?f=html';
      link.textContent = id;
      cell.append(link);
      for (const name of columns) row.insertCell().dataset.key = name;
    }
    const props = feature.get('props');
    for (const cell of row.cells) {
      if (cell.dataset.key !== undefined) cell.textContent = text(props[cell.dataset.key]);
    }
  }

  /** Mark the row of `feature` (none: no row) as selected, and scroll the
   *  table (not the page, which would move the map) to show it. */
  function highlight(feature) {
    const id = feature && feature.getId() !== undefined ? String(feature.getId()) : null;
    const box = $('table-box');
    for (const row of tbody.rows) {
      const chosen = row.dataset.id === id;
      row.classList.toggle('selected', chosen);
      row.setAttribute('aria-selected', String(chosen));
      if (!chosen) continue;
      const shown = box.getBoundingClientRect();
      const at = row.getBoundingClientRect();
      const top = shown.top + document.querySelector('#features thead').offsetHeight;
      if (at.top < top) box.scrollTop -= top - at.top;
      else if (at.bottom > shown.bottom) box.scrollTop += at.bottom - shown.bottom;
    }
  }

  /** Select `feature` on the map and in the table, and open it to edit. */
  function choose(feature) {
    select.getFeatures().clear();
    if (feature) select.getFeatures().push(feature);
    highlight(feature);
    const geometry = feature && feature.getGeometry();
    const view = map.getView();
    if (geometry && !ol.extent.containsExtent(view.calculateExtent(), geometry.getExtent())) {
      view.fit(geometry.getExtent(), { padding: [40, 40, 40, 40], maxZoom: Math.max(view.getZoom(), 12) });
    }
    if (feature && canWrite) {
      discard();
      openEdit(feature);
    }
  }

  select.on('select', (event) => {
    if (editing && editing.creating) {
      // A new feature stays chosen until it is saved or cancelled.
      select.getFeatures().clear();
      select.getFeatures().push(editing.feature);
      return;
    }
    const feature = event.selected[0] || null;
    highlight(feature);
    if (feature && canWrite) {
      discard();
      openEdit(feature);
    } else if (!feature) {
      discard();
      closeForm();
    }
  });
  tbody.addEventListener('click', (event) => {
    const row = event.target.closest('tr');
    if (!row || event.target.closest('a')) return;
    choose(source.getFeatureById(row.dataset.id));
  });
  // Rows take the keyboard's focus: Enter chooses one, as a click does.
  tbody.addEventListener('keydown', (event) => {
    const row = event.target.closest('tr');
    if (event.key !== 'Enter' || !row || event.target !== row) return;
    event.preventDefault();
    choose(source.getFeatureById(row.dataset.id));
  });

  async function load() {
    const response = await request('GET', mapElement.dataset.features);
    if (!response.ok) {
      mapElement.dataset.state = 'failed';
      status('The features could not be read: ' + (await problemOf(response)).detail);
      return;
    }
    const doc = await response.json();
    const objects = doc.type === 'FeatureCollection' ? doc.features : [doc];
    source.addFeatures(objects.map(toFeature));
    if (!source.isEmpty()) {
      map.getView().fit(source.getExtent(), { padding: [30, 30, 30, 30], maxZoom: 14 });
    }
    mapElement.dataset.count = String(source.getFeatures().length);
    map.once('rendercomplete', () => { mapElement.dataset.state = 'ready'; });
    map.render();
  }

  // ---- What the caller may do ----------------------------------------

  let canWrite = false;
  const translate = new ol.interaction.Translate({ features: select.getFeatures() });
  const modify = new ol.interaction.Modify({ features: select.getFeatures() });
  map.addInteraction(translate);
  map.addInteraction(modify);

  /** Ask the API (OPTIONS: Allow) whether this caller may write here. */
  async function checkRights() {
    const response = await request('OPTIONS', itemsUrl);
    const allow = (response.headers.get('Allow') || '').split(',').map((m) => m.trim());
    canWrite = response.ok && allow.includes('POST');
    $('editor').hidden = !canWrite;
    translate.setActive(canWrite);
    modify.setActive(canWrite);
    if (!canWrite) closeForm();
    $('token').placeholder = sessionStorage.getItem(TOKEN) ? '(a key is set for this tab)' : '';
    $('rights').textContent = response.status === 401 ? 'This key is not accepted.'
      : canWrite ? 'You may edit these features.' : 'You may read these features.';
  }

  $('credential').addEventListener('submit', (event) => {
    event.preventDefault();
    const token = $('token').value.trim();
    if (token) sessionStorage.setItem(TOKEN, token);
    $('token').value = '';
    checkRights();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN);
    checkRights();
  });

  // ---- The editor ------------------------------------------------------

  let schema = null;
  /** The collection's JSON Schema, read once. */
  async function loadSchema() {
    if (!schema) {
      const response = await request('GET', collectionUrl + '/schema', { accept: 'application/schema+json' });
      schema = await response.json();
    }
    return schema;
  }

  // What is being edited: { feature, id, etag, original, before, geometryChanged, creating }.
  let editing = null;
  let opening = 0;

  /** The one JSON type a property takes besides null: from `type` (a name or
   *  a list with "null"), from the values of an `enum`, or from the branch of
   *  an `anyOf` that is not null (a nullable enum). */
  function typeOf(def) {
    const types = [def.type].flat().filter((t) => t && t !== 'null');
    if (types.length === 1) return types[0];
    if (Array.isArray(def.enum)) {
      const kinds = new Set(def.enum.filter((v) => v !== null).map((v) => typeof v));
      if (kinds.size === 1) return [...kinds][0];
    }
    const branches = (def.anyOf || []).filter((d) => d.type !== 'null');
    return branches.length === 1 ? typeOf(branches[0]) : undefined;
  }

  const kindOf = (def) => {
    const type = typeOf(def);
    return ['integer', 'number', 'boolean', 'string'].includes(type) ? type : 'json';
  };

  /** An input for a property of this schema; numbers are typed as text, so
   *  that what is not one reaches the API, which says what is wrong. */
  function inputFor(def) {
    const kind = kindOf(def);
    if (kind === 'boolean') {
      const choice = document.createElement('select');
      for (const [value, label] of [['', '(null)'], ['true', 'true'], ['false', 'false']]) {
        const option = document.createElement('option');
        option.value = value;
        option.textContent = label;
        choice.append(option);
      }
      return choice;
    }
    if (kind === 'json') return document.createElement('textarea');
    const input = document.createElement('input');
    input.type = def.format === 'date' ? 'date' : 'text';
    if (kind !== 'string') input.inputMode = 'decimal';
    return input;
  }

  function setValue(input, value) {
    input.value = value === null || value === undefined ? ''
      : input.dataset.kind === 'json' ? JSON.stringify(value) : String(value);
  }

  /** The JSON value of an input: empty is null; what does not parse is sent as text. */
  function valueOf(input) {
    const raw = input.value;
    if (raw === '') return null;
    switch (input.dataset.kind) {
      case 'integer':
      case 'number': {
        const n = Number(raw);
        return raw.trim() !== '' && Number.isFinite(n) ? n : raw;
      }
      case 'boolean':
        return raw === 'true';
      case 'json':
        try { return JSON.parse(raw); } catch (_) { return raw; }
      default:
        return raw;
    }
  }

  /** The form's fields, from the schema, holding `values`. */
  function buildForm(values, creating) {
    const box = $('fields');
    box.replaceChildren();
    for (const [name, def] of Object.entries(schema.properties)) {
      const role = def['x-ogc-role'];
      if (role === 'primary-geometry' || (role === 'id' && (!creating || def.readOnly))) continue;
      const label = document.createElement('label');
      const caption = document.createElement('span');
      caption.className = 'name';
      caption.textContent = name;
      const input = inputFor(def);
      input.name = name;
      input.dataset.kind = kindOf(def);
      if (role === 'id') input.dataset.role = 'id';
      input.disabled = Boolean(def.readOnly);
      setValue(input, values[name]);
      const error = document.createElement('span');
      error.className = 'field-error';
      error.dataset.for = name;
      label.append(caption, ' ', input, error);
      box.append(label);
    }
  }

  const inputs = () => [...$('fields').querySelectorAll('[name]')].filter((input) => !input.disabled);

  function showForm(title, creating) {
    $('form-title').textContent = title;
    $('delete').hidden = creating;
    $('confirm-delete').hidden = true;
    $('conflict').hidden = true;
    $('feature-form').hidden = false;
  }

  function closeForm() {
    editing = null;
    $('feature-form').hidden = true;
    $('conflict').hidden = true;
  }

  function clearErrors() {
    for (const error of $('fields').querySelectorAll('.field-error')) error.textContent = '';
    for (const input of $('fields').querySelectorAll('.invalid')) input.classList.remove('invalid');
  }

  /** Put the feature as stored (`doc`) on the map and in the table. */
  function applyStored(feature, doc) {
    if (doc.geometry) feature.setGeometry(geojson.readGeometry(doc.geometry));
    feature.set('props', doc.properties || {});
    showRow(feature);
  }

  /** Read the feature as stored now, with its ETag, and edit that. */
  async function openEdit(feature) {
    const ticket = ++opening;
    const id = feature.getId();
    const [response] = await Promise.all([request('GET', itemUrl(id)), loadSchema()]);
    if (ticket !== opening) return; // another feature was chosen meanwhile
    if (!response.ok) {
      status('Feature ' + id + ' cannot be read: ' + (await problemOf(response)).detail);
      return;
    }
    const doc = await response.json();
    applyStored(feature, doc);
    editing = {
      feature,
      id,
      etag: response.headers.get('ETag'),
      original: doc.properties || {},
      before: feature.getGeometry() && feature.getGeometry().clone(),
      geometryChanged: false,
      creating: false,
    };
    clearErrors();
    buildForm(editing.original, false);
    $('geometry-note').textContent = 'Drag the feature, or its vertices, to move or reshape it.';
    showForm('Feature ' + id, false);
  }

  function geometryChanged() {
    if (!editing) return;
    editing.geometryChanged = true;
    $('geometry-note').textContent = 'The geometry has changed: save to keep it.';
  }
  translate.on('translateend', geometryChanged);
  modify.on('modifyend', geometryChanged);

  const writeGeometry = (feature) => geojson.writeGeometryObject(feature.getGeometry(), { decimals: 8 });

  /** What the form holds: the properties, and the geometry on the map. */
  function mine() {
    const properties = {};
    for (const input of inputs()) properties[input.name] = valueOf(input);
    return { properties, geometry: writeGeometry(editing.feature) };
  }

  $('feature-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const ed = editing;
    if (!ed) return;
    clearErrors();
    let response;
    if (ed.creating) {
      const body = { type: 'Feature', geometry: writeGeometry(ed.feature), properties: {} };
      for (const input of inputs()) {
        const value = valueOf(input);
        if (value === null) continue; // left out: the column's default
        if (input.dataset.role === 'id') body.id = value;
        else body.properties[input.name] = value;
      }
      status('Saving…');
      response = await request('POST', itemsUrl, { body, type: 'application/geo+json' });
    } else {
      const patch = {};
      const properties = {};
      for (const input of inputs()) {
        const value = valueOf(input);
        const before = ed.original[input.name];
        if (JSON.stringify(value) !== JSON.stringify(before === undefined ? null : before)) {
          properties[input.name] = value;
        }
      }
      if (Object.keys(properties).length) patch.properties = properties;
      if (ed.geometryChanged) patch.geometry = writeGeometry(ed.feature);
      if (!Object.keys(patch).length) {
        status('Nothing has changed.');
        return;
      }
      status('Saving…');
      response = await request('PATCH', itemUrl(ed.id), {
        body: patch, type: 'application/merge-patch+json', etag: ed.etag,
      });
    }
    await answered(ed, response);
  });

  /** Show what the API answered to a save. */
  async function answered(ed, response) {
    if (response.status === 200 || response.status === 201) {
      const doc = await response.json();
      // A caller who may write but not read gets the report: the id is in Location.
      const stored = doc.type === 'Feature' ? doc
        : { id: decodeURIComponent((response.headers.get('Location') || '').split('/').pop()), ...mine() };
      if (ed.creating) ed.feature.setId(stored.id);
      applyStored(ed.feature, stored);
      editing = {
        feature: ed.feature,
        id: stored.id,
        etag: response.headers.get('ETag'),
        original: stored.properties || {},
        before: ed.feature.getGeometry().clone(),
        geometryChanged: false,
        creating: false,
      };
      buildForm(editing.original, false);
      $('geometry-note').textContent = 'Drag the feature, or its vertices, to move or reshape it.';
      showForm('Feature ' + stored.id, false);
      highlight(ed.feature);
      status('Saved feature ' + stored.id + '.');
      return;
    }
    const problem = await problemOf(response);
    if (response.status === 412) {
      showConflict(ed);
      return;
    }
    const elsewhere = [];
    for (const error of problem.errors || []) {
      const match = /\/properties\/([^/]+)/.exec(error.pointer || '');
      const name = match && match[1].replace(/~1/g, '/').replace(/~0/g, '~');
      const input = name && inputs().find((i) => i.name === name);
      if (input) {
        input.classList.add('invalid');
        $('fields').querySelector('.field-error[data-for="' + CSS.escape(name) + '"]').textContent = error.message;
      } else {
        elsewhere.push(error.message);
      }
    }
    status('Not saved: ' + problem.detail + (elsewhere.length ? ' ' + elsewhere.join(' ') : ''));
  }

  // ---- Conflicts (412) ------------------------------------------------

  let conflict = null;

  function showConflict(ed) {
    conflict = { ed, mine: mine() };
    $('versions').hidden = true;
    $('conflict').hidden = false;
    status('Not saved: someone else changed feature ' + ed.id + ' after you opened it.');
  }

  $('reload').addEventListener('click', async () => {
    if (!conflict) return;
    const { ed } = conflict;
    conflict = null;
    await openEdit(ed.feature);
    status('Reloaded feature ' + ed.id + ' as it is saved now.');
  });

  $('compare').addEventListener('click', async () => {
    if (!conflict) return;
    const { ed, mine: yours } = conflict;
    const response = await request('GET', itemUrl(ed.id));
    if (response.status === 404) {
      status('Feature ' + ed.id + ' has been deleted meanwhile.');
      return;
    }
    const theirs = await response.json();
    const saved = theirs.properties || {};
    const body = $('versions').tBodies[0];
    body.replaceChildren();
    const names = [...new Set([...Object.keys(yours.properties), ...Object.keys(saved)])];
    const rows = names.map((name) => [name, text(yours.properties[name]), text(saved[name])]);
    const geometry = (g) => (g ? JSON.stringify(geojson.writeGeometryObject(geojson.readGeometry(g), { decimals: 8 })) : '');
    rows.push(['geometry', JSON.stringify(yours.geometry), geometry(theirs.geometry)]);
    for (const [name, a, b] of rows) {
      const row = body.insertRow();
      row.insertCell().textContent = name;
      for (const value of [a, b]) {
        const cell = row.insertCell();
        cell.textContent = value;
        cell.classList.toggle('differs', a !== b);
      }
    }
    $('versions').hidden = false;
  });

  // ---- Create, cancel, delete -----------------------------------------

  const DRAWN = {
    'geometry-point': 'Point',
    'geometry-linestring': 'LineString',
    'geometry-polygon': 'Polygon',
    'geometry-multipoint': 'MultiPoint',
    'geometry-multilinestring': 'MultiLineString',
    'geometry-multipolygon': 'MultiPolygon',
  };
  let draw = null;

  $('create').addEventListener('click', async () => {
    await loadSchema();
    closeForm();
    select.getFeatures().clear();
    highlight(null);
    const geometry = Object.values(schema.properties).find((d) => d['x-ogc-role'] === 'primary-geometry');
    const type = DRAWN[geometry && geometry.format] || 'Point';
    if (draw) map.removeInteraction(draw);
    draw = new ol.interaction.Draw({ type });
    select.setActive(false);
    map.addInteraction(draw);
    $('hint').textContent = /Point/.test(type) ? 'Click on the map to place the feature.'
      : 'Click on the map to draw it; double-click to finish.';
    draw.once('drawend', (event) => {
      map.removeInteraction(draw);
      draw = null;
      select.setActive(true);
      $('hint').textContent = '';
      const feature = event.feature;
      feature.set('props', {});
      source.addFeature(feature);
      select.getFeatures().push(feature);
      editing = { feature, creating: true, original: {}, geometryChanged: true };
      clearErrors();
      buildForm({}, true);
      $('geometry-note').textContent = 'Fill in its properties and save it.';
      showForm('New feature', true);
      status('');
    });
  });

  /** Undo what was not saved on the map: a new feature, a moved geometry. */
  function discard() {
    const ed = editing;
    if (ed && ed.creating) source.removeFeature(ed.feature);
    else if (ed && ed.geometryChanged && ed.before) ed.feature.setGeometry(ed.before.clone());
  }

  $('cancel').addEventListener('click', () => {
    discard();
    closeForm();
    select.getFeatures().clear();
    highlight(null);
    status('');
  });

  $('delete').addEventListener('click', () => {
    if (!editing) return;
    $('confirm-delete').hidden = false;
    status('Delete feature ' + editing.id + '? Click "Really delete" to confirm.');
  });

  $('confirm-delete').addEventListener('click', async () => {
    const ed = editing;
    if (!ed) return;
    $('confirm-delete').hidden = true;
    const response = await request('DELETE', itemUrl(ed.id), { etag: ed.etag });
    if (response.status === 204) {
      source.removeFeature(ed.feature);
      const row = rowOf(ed.id);
      if (row) row.remove();
      closeForm();
      status('Deleted feature ' + ed.id + '.');
    } else if (response.status === 412) {
      showConflict(ed);
    } else {
      status('Not deleted: ' + (await problemOf(response)).detail);
    }
  });

  load();
  checkRights();
})();
